// The leaseStream option against a real server: the same answers and errors as the calls, and
// 200 concurrent holders of a 10-slot limit over one stream.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { RateLimitClient, RateLimitError, type AcquireResult, type LeaseInfo } from "@ratelimit/client";

import { countingClient, tally } from "./lease-stream-fake.js";
import { startServer, type RunningServer } from "./support.js";

let server: RunningServer;
let unary: RateLimitClient;
let streamed: RateLimitClient;
let methods: string[];
before(async () => {
  server = await startServer();
  unary = new RateLimitClient(server.target);
  ({ client: streamed, methods } = countingClient(server.target, { leaseStream: true }));
});
after(async () => {
  unary.close();
  streamed.close();
  await server.stop();
});

/** What two answers share when they are the same decision (ids and instants differ). */
function shape(r: AcquireResult): unknown {
  const lease = (l: LeaseInfo | undefined) =>
    l && { name: l.name, key: l.key, source: l.source, count: l.count, holder: l.holder, ttl: l.expiresAt.getTime() - l.acquiredAt.getTime() };
  return {
    allowed: r.allowed, lease: lease(r.lease), reason: r.reason, deniedBy: r.deniedBy, replayed: r.replayed,
    retries: r.retryAfterMs !== undefined,
    results: r.results.map(({ retryAt, retryAfterMs, ...rest }) => ({ ...rest, retries: [retryAt !== undefined, retryAfterMs !== undefined] })),
  };
}

test("acquire, extend and release over the stream answer as the calls do", async () => {
  const answers = [];
  for (const [client, key] of [[unary, "unary"], [streamed, "stream"]] as const) {
    const config = { kind: "CONCURRENCY", capacity: 1, leaseTtlMs: 10_000 } as const;
    const limits = [{ name: "jobs", key, config }];
    const a = await client.acquire({ limits, ttlMs: 5000, holder: "pod-a", requestId: `req-${key}` });
    const replay = await client.acquire({ limits, ttlMs: 5000, holder: "pod-a", requestId: `req-${key}` });
    assert.equal(replay.lease!.id, a.lease!.id);
    const denied = await client.acquire({ limits });
    const ref = { name: "jobs", key, leaseId: a.lease!.id, config };
    const extended = await client.extend({ ...ref, ttlMs: 8000 });
    const released = await client.release(ref);
    const again = await client.release(ref);
    const lost = await client.extend(ref);
    answers.push({
      acquired: shape(a), replayed: shape(replay), denied: shape(denied),
      extended: [extended.state, extended.lease!.id === a.lease!.id, extended.lease!.expiresAt.getTime() - extended.lease!.acquiredAt.getTime() >= 8000],
      released, again, lost,
    });
  }
  // The keys differ ("unary", "stream"); everything else is the same.
  const [u, s] = JSON.parse(JSON.stringify(answers).replaceAll('"unary"', '"KEY"').replaceAll('"stream"', '"KEY"'));
  assert.deepEqual(s, u);
  assert.equal(u.acquired.allowed, true);
  assert.equal(u.replayed.replayed, true);
  assert.equal(u.denied.reason, "NO_FREE_SLOTS");
  assert.deepEqual(u.released, { state: "RELEASED", held: 0 });
  assert.deepEqual(tally(methods), { LeaseStream: 1 });
});

test("an invalid op rejects with the call's error", async () => {
  const config = { kind: "CONCURRENCY", capacity: 1 } as const;
  const cases: [string, (c: RateLimitClient) => Promise<unknown>][] = [
    ["lease_id", (c) => c.release({ name: "jobs", key: "k", leaseId: "zz", config })],
    ["lease_id", (c) => c.extend({ name: "jobs", key: "k", leaseId: "zz", config })],
    ["limits[0].key", (c) => c.acquire({ limits: [{ name: "jobs", key: "", config }] })],
    ["limits", (c) => c.acquire({ limits: [{ name: "api", key: "k", config: { kind: "TOKEN_BUCKET", rate: 1, periodMs: 1000 } }] })],
  ];
  for (const [field, call] of cases) {
    const [u, s] = await Promise.all([call(unary).catch((e: unknown) => e), call(streamed).catch((e: unknown) => e)]);
    assert.ok(u instanceof RateLimitError && s instanceof RateLimitError, `${String(u)} / ${String(s)}`);
    assert.deepEqual(
      [s.name, s.code, s.codeName, s.details, s.message, s.field],
      [u.name, u.code, u.codeName, u.details, u.message, u.field],
    );
    assert.ok(s.field === field || s.field?.startsWith(field), `${s.field} for ${field}`);
  }
  assert.deepEqual(tally(methods), { LeaseStream: 1 });
});

test("200 concurrent acquirers of 10 slots, over one stream, never hold more than 10", async () => {
  const { client, methods } = countingClient(server.target, { leaseStream: true });
  const limits = [{ name: "pool", key: "k", config: { kind: "CONCURRENCY", capacity: 10 } as const }];
  let held = 0;
  let most = 0;
  let acquires = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      acquires++;
      const r = await client.acquire({ limits, ttlMs: 30_000 }, { timeoutMs: 10_000 });
      if (!r.allowed) continue; // at once: another worker releases soon
      held++;
      most = Math.max(most, held);
      await new Promise((resolve) => setImmediate(resolve));
      held--;
      const released = await client.release({ name: "pool", key: "k", leaseId: r.lease!.id, config: limits[0]!.config }, { timeoutMs: 10_000 });
      assert.equal(released.state, "RELEASED");
      return;
    }
  };
  try {
    await Promise.all(Array.from({ length: 200 }, worker));
  } finally {
    client.close();
  }
  assert.ok(most <= 10, `${most} held at once`);
  assert.ok(most >= 2, `${most} held at once: the acquirers did not overlap`);
  assert.ok(acquires > 200, `${acquires} acquires: none was denied`);
  assert.deepEqual(tally(methods), { LeaseStream: 1 }); // one stream for all of it, no call
});
