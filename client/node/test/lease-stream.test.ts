// The leaseStream option against the fake with a LeaseStream (lease-stream-fake.ts): results
// matched to ops whatever their order, ops of one tick packed into one message (and split at
// 1000 ops and 64 KiB), a stream that ends failing its waiting ops as UNAVAILABLE and the next op
// opening another, a server without LeaseStream (calls for the client's life, logged once), a
// timed-out or aborted op, close(), and the leases' heartbeat and the middleware's slots as ops.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";

import { RateLimitClient, RateLimitError, status } from "@ratelimit/client";

import { appWith, serve } from "./express-app.js";
import { FakeLeaseStream, countingClient, tally } from "./lease-stream-fake.js";
import { eventually } from "./support.js";

const ref = (key: string, leaseId: string) => ({ name: "jobs", key, leaseId });
const hex = (n: number) => n.toString(16).padStart(32, "0");

/** `p`, or a rejection once `ms` have passed without it settling (a guard, not a wait). */
function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${ms} ms`)), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

describe("lease stream", () => {
  let fake: FakeLeaseStream;
  let client: RateLimitClient;
  let methods: string[];

  beforeEach(async () => {
    fake = await new FakeLeaseStream(1).start();
    ({ client, methods } = countingClient(fake.target, { leaseStream: true }));
  });
  afterEach(async () => {
    client.close();
    await fake.stop();
  });

  test("acquire, extend and release are ops of one stream, answered as the calls", async () => {
    const a = await client.acquire({ limits: [{ name: "jobs", key: "k" }], ttlMs: 2000, holder: "pod-a", requestId: "r1" });
    assert.equal(a.allowed, true);
    assert.equal(a.lease!.holder, "pod-a");
    assert.equal(a.lease!.expiresAt.getTime() - a.lease!.acquiredAt.getTime(), 2000);
    const denied = await client.acquire({ limits: [{ name: "jobs", key: "k" }] });
    assert.deepEqual([denied.allowed, denied.reason, denied.deniedBy], [false, "NO_FREE_SLOTS", 0]);
    const e = await client.extend({ ...ref("k", a.lease!.id), ttlMs: 60_000 });
    assert.equal(e.state, "HELD");
    assert.ok(e.lease!.expiresAt > a.lease!.expiresAt);
    assert.deepEqual(await client.release(ref("k", a.lease!.id)), { state: "RELEASED", held: 0 });
    assert.deepEqual(await client.release(ref("k", a.lease!.id)), { state: "NOT_HELD", held: 0 });
    assert.deepEqual(fake.ops.map((o) => o.kind), ["acquire", "acquire", "extend", "release", "release"]);
    assert.equal(fake.ops[0]!.request.request_id, "r1");
    assert.equal(Number(fake.ops[2]!.request.ttl.seconds), 60);
    assert.deepEqual(tally(methods), { LeaseStream: 1 });
  });

  test("results that come out of order are matched to their ops", async () => {
    fake.capacity = 5;
    fake.holdResults = true;
    const keys = ["a", "b", "c"];
    const acquires = keys.map((key) => client.acquire({ limits: [{ name: "jobs", key }], holder: `h-${key}` }));
    const release = client.release(ref("a", hex(7)));
    await fake.received(4);
    fake.answer((held) => held.reverse());
    const got = await Promise.all(acquires);
    assert.deepEqual(got.map((r) => [r.lease!.key, r.lease!.holder]), keys.map((k) => [k, `h-${k}`]));
    assert.deepEqual(await release, { state: "NOT_HELD", held: 1 });
  });

  test("ops issued in one tick go out in one message", async () => {
    fake.capacity = 10;
    const ops = [
      ...Array.from({ length: 5 }, (_, i) => client.acquire({ limits: [{ name: "jobs", key: `k${i}` }] })),
      client.release(ref("k0", hex(1))),
      client.extend(ref("k0", hex(2))),
    ];
    await Promise.all(ops);
    assert.deepEqual(fake.messages.map((m) => m.map((o) => o.kind)), [
      ["acquire", "acquire", "acquire", "acquire", "acquire", "release", "extend"],
    ]);
    assert.equal(new Set(fake.ops.map((o) => o.id)).size, 7);
  });

  test("a message holds at most 1000 ops and 64 KiB", async () => {
    const slow = { timeoutMs: 30_000 }; // a loaded machine's fake takes its time over so many
    const many = await Promise.all(Array.from({ length: 1500 }, (_, i) => client.release(ref("k", hex(i + 1)), slow)));
    assert.ok(many.every((r) => r.state === "NOT_HELD"));
    assert.deepEqual(fake.messages.map((m) => m.length), [1000, 500]);
    // 100 ops of over 1 KiB each: a message of them all would pass the fake's 64 KiB bound (the
    // real server's), which ends the stream with RESOURCE_EXHAUSTED, failing every op.
    const key = "x".repeat(1000);
    const big = await Promise.all(Array.from({ length: 100 }, (_, i) => client.release(ref(key, hex(i + 1)), slow)));
    assert.ok(big.every((r) => r.state === "NOT_HELD"));
    const sizes = fake.messages.slice(2).map((m) => m.length);
    assert.equal(sizes.reduce((a, b) => a + b, 0), 100);
    assert.ok(sizes.length >= 2 && sizes.every((n) => n < 100), String(sizes));
    assert.equal(fake.streams, 1);
  });

  test("an op's error rejects as its call's, and the stream goes on", async () => {
    fake.acquireError = status.UNAVAILABLE;
    const e = await client.acquire({ limits: [{ name: "jobs", key: "k" }] }).catch((x: unknown) => x);
    assert.ok(e instanceof RateLimitError);
    assert.deepEqual([e.code, e.codeName, e.details, e.message], [status.UNAVAILABLE, "UNAVAILABLE", "store unavailable", "UNAVAILABLE: store unavailable"]);
    fake.acquireError = undefined;
    assert.equal((await client.acquire({ limits: [{ name: "jobs", key: "k" }] })).allowed, true);
    assert.equal(fake.streams, 1);
  });

  test("the stream ending UNAVAILABLE rejects the waiting op; the next op opens a new stream", async () => {
    fake.holdResults = true;
    const waiting = client.acquire({ limits: [{ name: "jobs", key: "k" }] });
    await fake.received(1);
    fake.heldResults.splice(0);
    fake.endStreams(status.UNAVAILABLE, "server shutting down");
    const e = await waiting.catch((x: unknown) => x);
    assert.ok(e instanceof RateLimitError, String(e));
    assert.deepEqual([e.code, e.details, e.unavailable], [status.UNAVAILABLE, "server shutting down", true]);
    fake.holdResults = false;
    // The lost answer's lease is held still: leases do not belong to the stream.
    assert.equal((await client.acquire({ limits: [{ name: "jobs", key: "k" }] })).allowed, false);
    assert.equal(fake.held("jobs", "k"), 1);
    assert.equal(fake.streams, 2);
    assert.deepEqual(tally(methods), { LeaseStream: 2 });
  });

  test("results sent just before the stream's end are delivered; only the others fail", async () => {
    fake.capacity = 2;
    fake.holdResults = true;
    const first = client.acquire({ limits: [{ name: "jobs", key: "a" }] });
    const second = client.acquire({ limits: [{ name: "jobs", key: "b" }] });
    await fake.received(2);
    fake.heldResults.splice(1); // the second's result is lost with the stream
    fake.endStreams(status.UNAVAILABLE, "shutting down", true);
    assert.equal((await first).lease!.key, "a");
    await assert.rejects(second, (e: unknown) => e instanceof RateLimitError && e.code === status.UNAVAILABLE);
  });

  test("a timed-out op rejects promptly as a call's deadline does; its late result is discarded", async () => {
    fake.holdResults = true;
    const started = performance.now();
    const op = client.acquire({ limits: [{ name: "jobs", key: "k" }] }, { timeoutMs: 100 });
    const e = await within(2000, op, "the op of 100 ms").catch((x: unknown) => x);
    const took = performance.now() - started;
    assert.ok(e instanceof RateLimitError, String(e));
    assert.equal(e.code, status.DEADLINE_EXCEEDED);
    assert.match(e.details, /^Deadline exceeded after 0\.\d{3}s/);
    assert.ok(took >= 95 && took < 1000, `${took} ms`);
    // As a unary call's deadline: the same class and code.
    const { client: unary } = countingClient(fake.target);
    fake.extendHang = true;
    const u = await unary.extend(ref("k", hex(1)), { timeoutMs: 100 }).catch((x: unknown) => x);
    unary.close();
    assert.ok(u instanceof RateLimitError);
    assert.deepEqual([u.code, u.codeName], [e.code, e.codeName]);
    fake.answer(); // the late result: nothing waits for it
    fake.holdResults = false;
    assert.deepEqual(await client.release(ref("k", hex(1))), { state: "NOT_HELD", held: 1 });
    assert.equal(fake.streams, 1);
  });

  test("an aborted op rejects with the signal's reason", async () => {
    fake.holdResults = true;
    const controller = new AbortController();
    const op = client.acquire({ limits: [{ name: "jobs", key: "k" }] }, { signal: controller.signal });
    await fake.received(1);
    controller.abort(new Error("gave up"));
    await assert.rejects(op, /gave up/);
    await assert.rejects(client.acquire({ limits: [{ name: "jobs", key: "k" }] }, { signal: controller.signal }), /gave up/);
    assert.equal(fake.ops.length, 1);
  });

  test("arguments a call refuses before sending are refused alike", async () => {
    await assert.rejects(client.acquire({ limits: [{ name: "jobs", key: "\uDC00" }] }), (e: unknown) =>
      e instanceof TypeError && e.message.startsWith("limits[0].key: "));
    await assert.rejects(client.release(ref("k", hex(1)), { timeoutMs: NaN }), (e: unknown) =>
      e instanceof TypeError && e.message.startsWith("timeoutMs: "));
    assert.equal(fake.streams, 0);
  });

  test("close() ends the stream at once, once its ops are answered", async () => {
    assert.equal((await client.acquire({ limits: [{ name: "jobs", key: "k" }] })).allowed, true);
    assert.equal(fake.openStreams, 1);
    fake.holdResults = true;
    const inFlight = client.release(ref("k", hex(3)));
    await fake.received(2);
    const started = performance.now();
    client.close();
    fake.answer();
    assert.deepEqual(await inFlight, { state: "NOT_HELD", held: 1 });
    await fake.allClosed();
    // Well before the idle stream would have been closed (1 s after its last answer).
    assert.ok(performance.now() - started < 500, `${performance.now() - started} ms`);
  });

  test("withLease's heartbeat sends its extends as ops of the stream", async () => {
    const extensions = await client.withLease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 3000, heartbeatMs: 50 }, async (lease) => {
      await eventually(() => lease.extensions >= 2, 5000, "two extends");
      return lease.extensions;
    });
    const kinds = fake.ops.map((o) => o.kind);
    assert.equal(kinds.filter((k) => k === "extend").length, extensions);
    assert.deepEqual([kinds[0], kinds.at(-1)], ["acquire", "release"]);
    assert.equal(fake.extends.length, extensions); // every extend the fake decided came as an op
    assert.equal(tally(methods).Extend, undefined);
    assert.equal(fake.held("jobs", "k"), 0);
  });

  test("the middleware's inFlight slots are taken and given back as ops", async () => {
    const { url, close } = await serve(appWith({ client, inFlight: "inflight", keyGenerator: () => "caller" }));
    try {
      for (let i = 0; i < 3; i++) assert.equal((await fetch(url + "/")).status, 200);
    } finally {
      await close();
    }
    assert.deepEqual(fake.ops.map((o) => o.kind), ["acquire", "release", "acquire", "release", "acquire", "release"]);
    assert.equal(fake.held("inflight", "caller"), 0);
    assert.deepEqual(tally(methods), { LeaseStream: 1 });
  });
});

describe("lease stream: a server without LeaseStream", () => {
  test("falls back to calls for the client's life, logged once; the ops that found out are sent as calls", async () => {
    const fake = await new FakeLeaseStream(3, { stream: false }).start();
    const lines: string[] = [];
    const { client, methods } = countingClient(fake.target, { leaseStream: true, logger: { error: (l: string) => lines.push(l) } });
    try {
      const first = await Promise.all([1, 2].map(() => client.acquire({ limits: [{ name: "jobs", key: "k" }] })));
      assert.ok(first.every((r) => r.allowed));
      const e = await client.extend({ ...ref("k", first[0]!.lease!.id), ttlMs: 5000 });
      assert.equal(e.state, "HELD");
      assert.equal((await client.release(ref("k", first[1]!.lease!.id))).state, "RELEASED");
      assert.deepEqual(tally(methods), { LeaseStream: 1, Acquire: 2, Extend: 1, Release: 1 });
      assert.equal(fake.held("jobs", "k"), 1);
      assert.equal(lines.length, 1);
      assert.match(lines[0]!, /does not implement LeaseStream \(UNIMPLEMENTED/);
    } finally {
      client.close();
      await fake.stop();
    }
  });

  test("without the option, every lease call is a call", async () => {
    const fake = await new FakeLeaseStream(1).start();
    const { client, methods } = countingClient(fake.target);
    try {
      await client.withLease({ limits: [{ name: "jobs", key: "k" }] }, () => undefined);
      assert.deepEqual(tally(methods), { Acquire: 1, Release: 1 });
      assert.equal(fake.streams, 0);
    } finally {
      client.close();
      await fake.stop();
    }
  });
});
