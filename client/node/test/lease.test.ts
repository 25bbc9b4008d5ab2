// Concurrency leases against the fake of the lease calls (lease-fake.ts): the calls, the held
// lease (`await using`, withLease: released on exit and on exception), its heartbeat (real
// timers, TTLs of a few hundred ms), lost-lease detection, a replayed lease, a hung extend, a
// heartbeat longer than the TTL, a lease without a heartbeat (lost at its expiry, by a timer that
// holds no program: lease-unwatched.ts), heartbeatMs and waitMs refused, a program held alive by
// its lease alone (lease-holder.ts), and the Express middleware's inFlight.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { dirname, join } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import express from "express";

import { LeaseDeniedError, LeaseLostError, RateLimitClient, rateLimit, status } from "@ratelimit/client";

import { eventually } from "./support.js";
import { FakeLeases } from "./lease-fake.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("leases", () => {
  let fake: FakeLeases;
  let client: RateLimitClient;

  beforeEach(async () => {
    await fake?.stop();
    client?.close();
    fake = await new FakeLeases(1).start();
    client = new RateLimitClient(fake.target, { adminToken: "tok" });
  });
  after(async () => {
    client.close();
    await fake.stop();
  });

  test("acquire sends the request, and a denial is a value", async () => {
    const r = await client.acquire({ limits: [{ name: "jobs", key: "t1", count: 1 }], ttlMs: 2000, requestId: "req-1", holder: "pod-a" });
    assert.equal(r.allowed, true);
    assert.equal(r.deniedBy, -1);
    assert.equal(r.lease?.holder, "pod-a");
    assert.equal(r.lease!.expiresAt.getTime() - r.lease!.acquiredAt.getTime(), 2000);
    assert.equal(fake.acquires[0]!.request_id, "req-1");
    const d = await client.acquire({ limits: [{ name: "jobs", key: "t1" }] });
    assert.equal(d.allowed, false);
    assert.equal(d.lease, undefined);
    assert.equal(d.reason, "NO_FREE_SLOTS");
    assert.ok(d.retryAfterMs! > 1000 && d.retryAfterMs! <= 2000, String(d.retryAfterMs));
  });

  test("release, extend and listLeases", async () => {
    fake.capacity = 3;
    const config = { kind: "CONCURRENCY" as const, capacity: 3, leaseTtlMs: 5000 };
    const lease = (await client.acquire({ limits: [{ name: "jobs", key: "k", count: 2, config }] })).lease!;
    const sent = fake.acquires[0]!.limits[0].config;
    assert.equal(sent.kind, "CONCURRENCY");
    assert.equal(sent.period ?? null, null);
    assert.equal(Number(sent.lease_ttl.seconds), 5);
    const ref = { name: "jobs", key: "k", leaseId: lease.id, config };
    const e = await client.extend({ ...ref, ttlMs: 60_000 });
    assert.equal(e.state, "HELD");
    assert.ok(e.lease!.expiresAt > lease.expiresAt);
    const listed = await client.listLeases({ name: "jobs", key: "k" });
    assert.deepEqual([listed.held, listed.capacity, listed.leases.map((l) => l.id)], [2, 3, [lease.id]]);
    assert.deepEqual(fake.listTokens, ["Bearer tok"]);
    assert.deepEqual(await client.release(ref), { state: "RELEASED", held: 0 });
    assert.equal((await client.release(ref)).state, "NOT_HELD");
    assert.equal((await client.extend(ref)).state, "NOT_HELD");
  });

  test("listLeases pages", async () => {
    fake.capacity = 3;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await client.acquire({ limits: [{ name: "jobs", key: "k" }] })).lease!.id);
    const first = await client.listLeases({ name: "jobs", key: "k", pageSize: 2 });
    assert.equal(first.held, 3);
    assert.equal(first.leases.length, 2);
    assert.notEqual(first.nextPageToken, "");
    assert.equal(fake.lists[0]!.page_size, 2);
    const rest = await client.listLeases({ name: "jobs", key: "k", pageSize: 2, pageToken: first.nextPageToken });
    assert.equal(fake.lists[1]!.page_token, first.nextPageToken);
    assert.equal(rest.nextPageToken, "");
    assert.deepEqual([...first.leases, ...rest.leases].map((l) => l.id), ids);
  });

  test("await using releases at the end of the block, and on an exception", async () => {
    {
      await using lease = await client.lease({ limits: [{ name: "jobs", key: "k" }] });
      assert.equal(fake.held("jobs", "k"), 1);
      assert.equal(lease.lost, false);
    }
    assert.equal(fake.held("jobs", "k"), 0);
    await assert.rejects(async () => {
      await using _lease = await client.lease({ limits: [{ name: "jobs", key: "k" }] });
      assert.equal(fake.held("jobs", "k"), 1);
      throw new Error("work failed");
    }, /work failed/);
    assert.equal(fake.held("jobs", "k"), 0);
    assert.equal(fake.releases.length, 2);
  });

  test("withLease releases when the function settles", async () => {
    const out = await client.withLease({ limits: [{ name: "jobs", key: "k" }] }, async (lease) => {
      assert.equal(fake.held("jobs", "k"), 1);
      return lease.id;
    });
    assert.equal(fake.releases[0]!.lease_id, out);
    await assert.rejects(client.withLease({ limits: [{ name: "jobs", key: "k" }] }, () => { throw new Error("boom"); }), /boom/);
    assert.equal(fake.held("jobs", "k"), 0);
  });

  test("a denied lease rejects with LeaseDeniedError carrying retryAfterMs", async () => {
    await using _held = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 10_000 });
    const e = await client.lease({ limits: [{ name: "jobs", key: "k" }] }).catch((x: unknown) => x);
    assert.ok(e instanceof LeaseDeniedError);
    assert.equal(e.result.reason, "NO_FREE_SLOTS");
    assert.ok(e.retryAfterMs! > 9000 && e.retryAfterMs! <= 10_000);
  });

  test("waitMs retries until a slot frees", async () => {
    const first = await client.lease({ limits: [{ name: "jobs", key: "k" }], heartbeatMs: 0 });
    setTimeout(() => void first.release(), 120);
    await using second = await client.lease({ limits: [{ name: "jobs", key: "k" }], waitMs: 5000 });
    assert.equal(fake.held("jobs", "k"), 1);
    assert.ok(fake.acquires.length >= 3, `${fake.acquires.length} acquires`);
    assert.notEqual(second.id, first.id);
  });

  test("the heartbeat extends every third of the TTL until released", async () => {
    // A TTL the first acquire (connecting too) cannot use up on a loaded machine: a lease whose
    // answer came too late to be extended before its expiry is lost.
    const lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 300 });
    const first = lease.info.expiresAt;
    await eventually(() => lease.extensions >= 3, 5000, "three extends");
    await sleep(60);
    assert.equal(fake.held("jobs", "k"), 1); // held past its TTL by the heartbeat alone
    assert.ok(lease.info.expiresAt > first);
    assert.equal(Number(fake.extends[0]!.ttl.nanos), 300e6);
    await lease.release();
    const count = fake.extends.length;
    await sleep(220);
    assert.equal(fake.extends.length, count);
    assert.equal(fake.held("jobs", "k"), 0);
  });

  test("an extend answering NOT_HELD aborts the lease's signal", async () => {
    fake.extendState = "NOT_HELD";
    await using lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 150 });
    await eventually(() => lease.lost, 5000, "the lease lost");
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.match(lease.signal.reason.message, /NOT_HELD/);
    assert.throws(() => lease.throwIfLost(), LeaseLostError);
    assert.equal(fake.extends.length, 1);
  });

  test("extends failing until the expiry lose the lease", async () => {
    fake.extendError = status.UNAVAILABLE;
    const start = performance.now();
    await using lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 600 });
    await eventually(() => lease.lost, 5000, "the lease lost");
    assert.equal(fake.extends.length, 2); // the next would come after the expiry
    assert.ok(performance.now() - start >= 400);
    assert.match(lease.signal.reason.message, /every extend failed.*UNAVAILABLE/);
  });

  test("a replayed lease is extended at once", async () => {
    const limits = [{ name: "jobs", key: "k" }];
    const first = (await client.acquire({ limits, ttlMs: 30_000, requestId: "job-42" })).lease!;
    fake.expireIn(first.id, 300); // the retry comes when 1% of the first lease is left
    await using lease = await client.lease({ limits, ttlMs: 30_000, requestId: "job-42" });
    assert.equal(lease.result.replayed, true);
    assert.equal(lease.id, first.id);
    await eventually(() => fake.extends.length >= 1, 5000, "an extend");
    assert.equal(lease.lost, false);
  });

  test("a hung extend is given up by the lease's expiry, not the client's timeout", async () => {
    fake.extendHang = true;
    const patient = new RateLimitClient(fake.target, { timeoutMs: 5000 });
    try {
      await using lease = await patient.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 600 });
      await eventually(() => fake.extendDeadlines.length >= 1, 5000, "an extend");
      assert.ok(fake.extendDeadlines[0]! <= 600, `the extend may wait ${fake.extendDeadlines[0]} ms`);
      await eventually(() => lease.lost, 5000, "the lease lost");
      assert.match(lease.signal.reason.message, /DEADLINE_EXCEEDED/);
    } finally {
      patient.close();
    }
  });

  test("a heartbeat longer than the TTL extends before the expiry", async () => {
    // At half the time left, not a minute later (after the lease's expiry).
    await using lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 300, heartbeatMs: 60_000 });
    await eventually(() => lease.extensions >= 3, 5000, "three extends");
    assert.equal(lease.lost, false);
    assert.equal(fake.held("jobs", "k"), 1);
  });

  test("a lease without a heartbeat is lost at its expiry, unless released before", async () => {
    const start = performance.now();
    const lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 200, heartbeatMs: 0 });
    assert.equal(lease.lost, false);
    await eventually(() => lease.lost, 5000, "the lease lost");
    assert.ok(performance.now() - start >= 200, "not before its expiry");
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.match(lease.signal.reason.message, /expired before an extend could be sent \(no heartbeat/);
    assert.throws(() => lease.throwIfLost(), LeaseLostError);
    assert.equal(fake.extends.length, 0);
    await lease.release();
    // Released before its expiry: the timer is cleared, the lease is never lost.
    const released = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 150, heartbeatMs: 0 });
    assert.equal((await released.release()).state, "RELEASED");
    await sleep(250);
    assert.equal(released.lost, false);
  });

  test("a lease without a heartbeat keeps no process running", async () => {
    // Its TTL is a minute: the timer of its expiry must not hold the program that long.
    const program = join(dirname(fileURLToPath(import.meta.url)), "lease-unwatched.js");
    const started = performance.now();
    const child = spawn(process.execPath, [program, fake.target], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    assert.equal(code, 0, `the program exited with ${code}: ${out}`);
    assert.equal(out, "holding\n");
    assert.ok(performance.now() - started < 30_000, `the program ran ${Math.round(performance.now() - started)} ms`);
    assert.equal(fake.held("jobs", "k"), 1); // left to expire at the server
  });

  for (const [field, value] of [["heartbeatMs", -1], ["heartbeatMs", NaN], ["heartbeatMs", Infinity], ["waitMs", -1], ["waitMs", NaN], ["waitMs", Infinity]] as const) {
    test(`a ${field} of ${value} is refused before any call`, async () => {
      await assert.rejects(client.lease({ limits: [{ name: "jobs", key: "k" }], [field]: value }), (e: unknown) =>
        e instanceof TypeError && e.message.startsWith(`${field}: `) && e.message.includes(`got ${value}`));
      assert.equal(fake.acquires.length, 0);
    });
  }

  test("a held lease keeps its process running until it is lost", async () => {
    fake.extendState = "NOT_HELD"; // the first extend loses the lease
    const holder = join(dirname(fileURLToPath(import.meta.url)), "lease-holder.js");
    const child = spawn(process.execPath, [holder, fake.target], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    assert.equal(code, 0, `the holder exited with ${code}: ${out}`);
    assert.match(out, /^holding\nlost: LeaseLostError: lease lost: extend answered NOT_HELD\n$/);
    assert.equal(fake.extends.length, 1);
    assert.equal(fake.releases.length, 1);
  });
});

describe("express inFlight", () => {
  let fake: FakeLeases;
  let client: RateLimitClient;
  before(async () => {
    fake = await new FakeLeases(2).start();
    client = new RateLimitClient(fake.target);
  });
  after(async () => {
    client.close();
    await fake.stop();
  });

  async function serve(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
    const http: Server = await new Promise((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    return {
      url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
      close: () => new Promise<void>((resolve) => { http.closeAllConnections(); http.close(() => resolve()); }),
    };
  }

  test("max in flight 2: exactly two run, the rest 429, slots back after", async () => {
    let running = 0;
    let most = 0;
    let go!: () => void;
    const gate = new Promise<void>((r) => (go = r));
    const app = express();
    app.use(rateLimit({ client, inFlight: "inflight", keyGenerator: () => "caller" }));
    app.get("/", async (_req, res) => {
      running++;
      most = Math.max(most, running);
      await gate;
      running--;
      res.send("done");
    });
    app.get("/fail", () => { throw new Error("handler failed"); });
    app.use((_e: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).send("failed");
    });
    const { url, close } = await serve(app);
    try {
      const pending = Array.from({ length: 5 }, () => fetch(url + "/"));
      await eventually(() => running === 2, 5000, "two requests running");
      const settled: Response[] = [];
      for (const p of pending) void p.then((r) => settled.push(r));
      await eventually(() => settled.length === 3, 5000, "three answered");
      for (const r of settled) {
        assert.equal(r.status, 429);
        // Not the fake's 30 s lease TTL: a slot comes back as its request ends.
        assert.equal(r.headers.get("retry-after"), "1");
        assert.equal(r.headers.get("ratelimit-reset"), "1");
        assert.equal(r.headers.get("ratelimit-limit"), "2");
      }
      assert.equal(fake.held("inflight", "caller"), 2);
      go();
      const all = await Promise.all(pending);
      assert.deepEqual(all.map((r) => r.status).sort(), [200, 200, 429, 429, 429]);
      assert.equal(most, 2);
      await eventually(() => fake.held("inflight", "caller") === 0, 5000, "the slots back");
      assert.equal((await fetch(url + "/")).status, 200);
      assert.equal((await fetch(url + "/fail")).status, 500);
      await eventually(() => fake.held("inflight", "caller") === 0, 5000, "the failed request's slot back");
    } finally {
      await close();
    }
  });

  test("inFlight with a rate limit sends both in one acquire, and follows the failure mode", async () => {
    const before = fake.acquires.length;
    const calls: string[] = [];
    const handler = rateLimit({
      client, name: "api", inFlight: "inflight", inFlightConfig: { kind: "CONCURRENCY", capacity: 2 },
      keyGenerator: () => "k2", failureMode: "open",
    });
    // The response closes once the handler is done with it.
    const closers: (() => void)[] = [];
    const res = { setHeader: () => undefined, status: () => undefined, send: () => undefined, once: (_e: "close", l: () => void) => void closers.push(l) };
    const closeAll = () => closers.splice(0).forEach((l) => l());
    await handler({}, res, () => calls.push("next"));
    closeAll();
    const sent = fake.acquires[before]!;
    assert.deepEqual(sent.limits.map((l: { name: string }) => l.name), ["inflight", "api"]);
    assert.equal(sent.limits[0].config.kind, "CONCURRENCY");
    fake.acquireError = status.UNAVAILABLE;
    await handler({}, res, () => calls.push("next (open)"));
    closeAll();
    assert.deepEqual(calls, ["next", "next (open)"]);
    fake.acquireError = undefined;
    assert.throws(() => rateLimit({ client, inFlight: "" }), /inFlight/);
    assert.throws(() => rateLimit({ client } as never), /name/);
  });

  test("a client that leaves before its slot is acquired gets the slot given back", async () => {
    let keyAsked!: () => void;
    const asked = new Promise<void>((r) => (keyAsked = r));
    let giveKey!: (k: string) => void;
    const handler = rateLimit({
      client, inFlight: "inflight",
      keyGenerator: () => { keyAsked(); return new Promise<string>((r) => (giveKey = r)); },
    });
    const onClose: (() => void)[] = [];
    let answered = false;
    const res = {
      setHeader: () => undefined, status: () => undefined, send: () => { answered = true; },
      once: (_e: "close", l: () => void) => void onClose.push(l),
    };
    let nexts = 0;
    const done = handler({}, res, () => { nexts++; });
    await asked;
    for (const l of onClose) l(); // the connection closes while the key is being made
    giveKey("gone");
    await done;
    assert.equal(nexts, 0, "nobody is left to serve");
    assert.equal(answered, false);
    await eventually(() => fake.held("inflight", "gone") === 0, 5000, "the slot back");
  });

  test("the middleware's timeoutMs is the deadline of its Acquire", async () => {
    const handler = rateLimit({ client, inFlight: "inflight", keyGenerator: () => "deadline", timeoutMs: 250 });
    const closers: (() => void)[] = [];
    const res = { setHeader: () => undefined, status: () => undefined, send: () => undefined, once: (_e: "close", l: () => void) => void closers.push(l) };
    const sentAt = Date.now();
    let served = false;
    await handler({}, res, () => { served = true; });
    closers.splice(0).forEach((l) => l());
    assert.ok(served);
    const deadline = fake.acquireDeadlines.at(-1)!;
    assert.ok(deadline - sentAt <= 300, `deadline ${deadline - sentAt} ms after the call, not the client's 1000`);
    await eventually(() => fake.held("inflight", "deadline") === 0, 5000, "the slot back");
  });
});
