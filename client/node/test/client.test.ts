// The client against a real ratelimit-server: every RPC, typed results, errors, deadlines,
// reserve-and-wait and its cancellation, the admin token, TLS.
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  DEFAULT_TIMEOUT_MS,
  RateLimitClient,
  RateLimitError,
  status,
  type LimitConfig,
} from "@ratelimit/client";

import { eventually, makeTlsFiles, startServer, tempDir, type RunningServer } from "./support.js";

const LIMITS = `limits:
  - name: api
    kind: token_bucket
    rate: 5
    period: 1h
    capacity: 5
  - name: other
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 1
`;

/** Balances refill continuously: compare to a hundredth of a token. */
function near(actual: number, expected: number, what = "value"): void {
  assert.ok(Math.abs(actual - expected) < 0.01, `${what}: ${actual}, expected about ${expected}`);
}

const HOURLY: LimitConfig = { kind: "TOKEN_BUCKET", rate: 1, periodMs: 3_600_000, capacity: 1 };

describe("RateLimitClient against a server", () => {
  let server: RunningServer;
  let client: RateLimitClient;
  let keyNo = 0;
  const key = () => `k${++keyNo}-${Date.now()}`;

  before(async () => {
    server = await startServer({ limits: LIMITS, adminToken: "s3cret" });
    client = new RateLimitClient(server.target, { timeoutMs: 10_000 });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("consume takes count tokens (default 1) and reports typed results", async () => {
    const k = key();
    const first = await client.consume({ name: "api", key: k, count: 2 });
    assert.equal(first.allowed, true);
    assert.equal(first.deniedBy, -1);
    assert.equal(first.failedOpen, false);
    assert.equal(first.replayed, false);
    assert.equal(first.reason, undefined);
    assert.equal(first.results.length, 1);
    assert.deepEqual(
      { name: first.results[0]!.name, key: first.results[0]!.key, allowed: first.results[0]!.allowed },
      { name: "api", key: k, allowed: true },
    );
    near(first.results[0]!.value, 3);
    assert.equal(first.results[0]!.capacity, 5);

    const second = await client.consume({ limits: [{ name: "api", key: k }] });
    near(second.results[0]!.value, 2, "a request without count takes 1");
  });

  test("a denial carries reason, deniedBy and retryAt as a Date in the future", async () => {
    const k = key();
    await client.consume({ name: "api", key: k, count: 4 });
    const before = Date.now();
    const denied = await client.consume({ name: "api", key: k, count: 3 });
    assert.equal(denied.allowed, false);
    assert.equal(denied.reason, "INSUFFICIENT_TOKENS");
    assert.equal(denied.deniedBy, 0);
    assert.ok(denied.retryAt instanceof Date);
    // 2 missing tokens at 5 per hour: 24 minutes.
    assert.ok(denied.retryAt.getTime() > before + 23 * 60_000, String(denied.retryAt));
    assert.ok(denied.retryAfterMs! > 23 * 60_000 && denied.retryAfterMs! <= 24 * 60_000 + 1, String(denied.retryAfterMs));
    near(denied.results[0]!.value, 1, "nothing is taken by a denied request");
  });

  test("check answers without taking", async () => {
    const k = key();
    await client.consume({ name: "api", key: k, count: 1 });
    const c1 = await client.check({ name: "api", key: k, count: 1 });
    const c2 = await client.check({ name: "api", key: k, count: 1 });
    assert.equal(c1.allowed, true);
    near(c1.results[0]!.value, 4, "check reports the current balance");
    near(c2.results[0]!.value, 4, "check wrote nothing");
    const tooMuch = await client.check({ name: "api", key: k, count: 5 });
    assert.equal(tooMuch.allowed, false);
    assert.equal(tooMuch.reason, "INSUFFICIENT_TOKENS");
  });

  test("a request of several limits is all-or-nothing", async () => {
    const k = key();
    await client.consume({ name: "other", key: k });
    const r = await client.consume({
      limits: [
        { name: "api", key: k, count: 1 },
        { name: "other", key: k, count: 1 },
      ],
    });
    assert.equal(r.allowed, false);
    assert.equal(r.deniedBy, 1);
    assert.equal(r.results[0]!.allowed, true);
    assert.equal(r.results[1]!.allowed, false);
    const api = await client.check({ name: "api", key: k });
    near(api.results[0]!.value, 5, "the allowing limit was not charged");
  });

  test("a count beyond capacity is COUNT_EXCEEDS_CAPACITY without retryAt", async () => {
    const r = await client.consume({ name: "api", key: key(), count: 6 });
    assert.equal(r.allowed, false);
    assert.equal(r.reason, "COUNT_EXCEEDS_CAPACITY");
    assert.equal(r.retryAt, undefined);
  });

  test("inline configs are sent with their durations", async () => {
    const k = key();
    // 1000-day windows aligned to the epoch: no window boundary falls within the test.
    const period = 1000 * 86_400_000;
    const config: LimitConfig = { kind: "FIXED_WINDOW", rate: 3, periodMs: period, startMs: 0, capacity: 3 };
    const r = await client.consume({ name: "inline_daily", key: k, count: 3, config });
    assert.equal(r.allowed, true);
    assert.equal(r.results[0]!.capacity, 3);
    const denied = await client.consume({ name: "inline_daily", key: k, config });
    assert.equal(denied.allowed, false);
    // The retry is at the next window boundary.
    assert.equal(denied.retryAt!.getTime(), Math.ceil(Date.now() / period) * period);
    // A sub-millisecond period goes through as well (1 µs: 1 token per µs refills at once).
    const fast = await client.consume({
      name: "inline_fast",
      key: k,
      config: { kind: "TOKEN_BUCKET", rate: 1, periodMs: 0.001 },
    });
    assert.equal(fast.allowed, true);
  });

  test("reserve goes into debt and returns when the work may run", async () => {
    const k = key();
    const before = Date.now();
    const first = await client.reserve({ name: "res", key: k, config: HOURLY });
    assert.equal(first.allowed, true);
    const second = await client.reserve({ name: "res", key: k, config: HOURLY });
    assert.equal(second.allowed, true);
    near(second.results[0]!.value, -1);
    assert.ok(second.retryAt!.getTime() >= before + 3_600_000 - 1000, String(second.retryAt));
  });

  test("reserveAndWait returns no earlier than retryAt", async () => {
    const k = key();
    const config: LimitConfig = { kind: "TOKEN_BUCKET", rate: 1, periodMs: 300, capacity: 1 };
    await client.consume({ name: "wait", key: k, config });
    const r = await client.reserveAndWait({ name: "wait", key: k, config });
    const returnedAt = Date.now();
    assert.equal(r.allowed, true);
    assert.ok(r.retryAt instanceof Date);
    assert.ok(returnedAt >= r.retryAt.getTime(), `returned at ${returnedAt}, retryAt ${r.retryAt.getTime()}`);
  });

  test("reserveAndWait returns a denied reservation at once", async () => {
    const k = key();
    const config: LimitConfig = { ...HOURLY, maxReserved: 0 };
    await client.consume({ name: "nodebt", key: k, config });
    const r = await client.reserveAndWait({ name: "nodebt", key: k, config });
    assert.equal(r.allowed, false);
    assert.equal(r.reason, "MAX_RESERVED_EXCEEDED");
  });

  test("reserveAndWait rejects with the abort reason when the signal aborts during the wait", async () => {
    const k = key();
    await client.consume({ name: "cancel", key: k, config: HOURLY });
    const controller = new AbortController();
    const waiting = client.reserveAndWait({ name: "cancel", key: k, config: HOURLY }, { signal: controller.signal });
    // The reservation is taken (the balance is in debt), then the caller gives up.
    await eventually(async () => (await client.check({ name: "cancel", key: k, config: HOURLY })).results[0]!.value < 0);
    controller.abort();
    await assert.rejects(waiting, (e: Error) => e.name === "AbortError");
  });

  test("an already aborted signal rejects without reserving", async () => {
    const k = key();
    const controller = new AbortController();
    controller.abort(new Error("gave up"));
    await assert.rejects(
      client.reserveAndWait({ name: "cancel2", key: k, config: HOURLY }, { signal: controller.signal }),
      /gave up/,
    );
    const c = await client.check({ name: "cancel2", key: k, config: HOURLY });
    near(c.results[0]!.value, 1, "still full: nothing was reserved");
  });

  test("bad input surfaces the server's field and code as a RateLimitError", async () => {
    await assert.rejects(client.consume({ name: "api", key: "" }), (e: unknown) => {
      assert.ok(e instanceof RateLimitError);
      assert.ok(e instanceof Error);
      assert.equal(e.code, status.INVALID_ARGUMENT);
      assert.equal(e.codeName, "INVALID_ARGUMENT");
      assert.equal(e.field, "limits[0].key");
      assert.match(e.details, /^limits\[0\]\.key: /);
      assert.match(e.message, /^INVALID_ARGUMENT: limits\[0\]\.key: /);
      return true;
    });
    await assert.rejects(
      client.consume({ name: "inl", key: "k", config: { kind: "TOKEN_BUCKET", rate: -5, periodMs: 1000 } }),
      (e: unknown) => e instanceof RateLimitError && e.field === "limits[0].config.rate",
    );
    await assert.rejects(
      client.consume({ name: "no_such_limit", key: "k" }),
      (e: unknown) => e instanceof RateLimitError && e.code === status.NOT_FOUND,
    );
  });

  test("reset without a token is UNAUTHENTICATED, with a wrong one PERMISSION_DENIED", async () => {
    const saved = process.env.RATELIMIT_ADMIN_TOKEN;
    delete process.env.RATELIMIT_ADMIN_TOKEN;
    const anonymous = new RateLimitClient(server.target, { timeoutMs: 10_000 });
    const wrong = new RateLimitClient(server.target, { adminToken: "nope", timeoutMs: 10_000 });
    try {
      await assert.rejects(anonymous.reset({ name: "api", key: "x" }), (e: unknown) => e instanceof RateLimitError && e.code === status.UNAUTHENTICATED);
      await assert.rejects(wrong.reset({ name: "api", key: "x" }), (e: unknown) => e instanceof RateLimitError && e.code === status.PERMISSION_DENIED);
    } finally {
      anonymous.close();
      wrong.close();
      if (saved !== undefined) process.env.RATELIMIT_ADMIN_TOKEN = saved;
    }
  });

  test("reset with the token from a file, from RATELIMIT_ADMIN_TOKEN, and of every key", async () => {
    const k = key();
    await client.consume({ name: "api", key: k, count: 5 });
    const dir = tempDir();
    writeFileSync(join(dir, "token"), "s3cret\nignored second line\n");
    const fromFile = new RateLimitClient(server.target, { adminTokenFile: join(dir, "token"), timeoutMs: 10_000 });
    const saved = process.env.RATELIMIT_ADMIN_TOKEN;
    process.env.RATELIMIT_ADMIN_TOKEN = "s3cret";
    const fromEnv = new RateLimitClient(server.target, { timeoutMs: 10_000 });
    if (saved === undefined) delete process.env.RATELIMIT_ADMIN_TOKEN;
    else process.env.RATELIMIT_ADMIN_TOKEN = saved;
    try {
      await fromFile.reset({ name: "api", key: k });
      near((await client.check({ name: "api", key: k })).results[0]!.value, 5, "full again");
      await client.consume({ name: "api", key: k, count: 5 });
      await fromEnv.reset({ name: "api", allKeys: true });
      near((await client.check({ name: "api", key: k })).results[0]!.value, 5, "full again");
      await client.consume({ name: "inl_reset", key: k, config: HOURLY });
      await fromEnv.reset({ name: "inl_reset", key: k, source: "INLINE" });
      assert.equal((await client.check({ name: "inl_reset", key: k, config: HOURLY })).allowed, true);
    } finally {
      fromFile.close();
      fromEnv.close();
    }
  });

  test("a call signal cancels the call", async () => {
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(client.check({ name: "api", key: "k" }, { signal: controller.signal }), (e: Error) => e.name === "AbortError");
  });
});

describe("deadlines", () => {
  let silent: Server;
  const sockets = new Set<Socket>();
  let target: string;
  before(async () => {
    // Accepts connections and never answers: only the deadline ends a call.
    silent = createServer((socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    });
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const addr = silent.address();
    target = `127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });

  test("every call has a deadline by default (1 s)", async () => {
    assert.equal(DEFAULT_TIMEOUT_MS, 1000);
    const client = new RateLimitClient(target);
    try {
      const started = Date.now();
      await assert.rejects(client.consume({ name: "api", key: "k" }), (e: unknown) => e instanceof RateLimitError && e.code === status.DEADLINE_EXCEEDED && e.unavailable);
      assert.ok(Date.now() - started >= 900);
    } finally {
      client.close();
    }
  });

  test("a timeout that is not a positive finite number is a TypeError, never a crash", async () => {
    for (const bad of [NaN, Infinity, 0, -5, 1e16]) {
      assert.throws(() => new RateLimitClient(target, { timeoutMs: bad }), /^TypeError: timeoutMs: must be a positive, finite number/);
    }
    const client = new RateLimitClient(target, { timeoutMs: 60_000 });
    try {
      for (const bad of [NaN, Infinity, 1e16]) {
        await assert.rejects(client.consume({ name: "api", key: "k" }, { timeoutMs: bad }), TypeError);
      }
    } finally {
      client.close();
    }
  });

  test("a per-call timeout overrides the client's", async () => {
    const client = new RateLimitClient(target, { timeoutMs: 60_000 });
    try {
      await assert.rejects(client.consume({ name: "api", key: "k" }, { timeoutMs: 50 }), (e: unknown) => e instanceof RateLimitError && e.code === status.DEADLINE_EXCEEDED);
    } finally {
      client.close();
    }
  });
});

describe("TLS", () => {
  test("connects over TLS with a CA file and a server name; plaintext fails", async () => {
    const dir = tempDir();
    const tls = makeTlsFiles(dir);
    const server = await startServer({
      dir,
      limits: LIMITS,
      args: [`--tls_cert_file=${tls.cert}`, `--tls_key_file=${tls.key}`],
    });
    const secure = new RateLimitClient(server.target, {
      tls: { caFile: tls.ca, serverName: "ratelimit.test" },
      timeoutMs: 10_000,
    });
    const plain = new RateLimitClient(server.target, { timeoutMs: 2000 });
    try {
      const r = await secure.consume({ name: "api", key: "tls" });
      assert.equal(r.allowed, true);
      await assert.rejects(plain.consume({ name: "api", key: "tls" }), (e: unknown) => e instanceof RateLimitError && e.unavailable);
    } finally {
      secure.close();
      plain.close();
      await server.stop();
    }
  });

  test("mTLS: the client certificate and key are presented; without them the handshake fails", async () => {
    const dir = tempDir();
    const tls = makeTlsFiles(dir);
    const server = await startServer({
      dir,
      limits: LIMITS,
      args: [`--tls_cert_file=${tls.cert}`, `--tls_key_file=${tls.key}`, `--tls_client_ca_file=${tls.ca}`],
    });
    const withCert = new RateLimitClient(server.target, {
      tls: { caFile: tls.ca, certFile: tls.clientCert, keyFile: tls.clientKey, serverName: "ratelimit.test" },
      timeoutMs: 10_000,
    });
    const withoutCert = new RateLimitClient(server.target, {
      tls: { caFile: tls.ca, serverName: "ratelimit.test" },
      timeoutMs: 5000,
    });
    try {
      assert.equal((await withCert.consume({ name: "api", key: "mtls" })).allowed, true);
      await assert.rejects(withoutCert.consume({ name: "api", key: "mtls" }), (e: unknown) => e instanceof RateLimitError && e.unavailable);
    } finally {
      withCert.close();
      withoutCert.close();
      await server.stop();
    }
  });
});

describe("reset on a server started without an admin token", () => {
  test("is PERMISSION_DENIED \"Reset is disabled\", code and message as the server said them", async () => {
    const server = await startServer({ limits: LIMITS });
    const saved = process.env.RATELIMIT_ADMIN_TOKEN;
    delete process.env.RATELIMIT_ADMIN_TOKEN;
    const anonymous = new RateLimitClient(server.target, { timeoutMs: 10_000 });
    const withToken = new RateLimitClient(server.target, { adminToken: "s3cret", timeoutMs: 10_000 });
    if (saved !== undefined) process.env.RATELIMIT_ADMIN_TOKEN = saved;
    try {
      for (const client of [anonymous, withToken]) {
        await assert.rejects(client.reset({ name: "api", key: "x" }), (e: unknown) => {
          assert.ok(e instanceof RateLimitError);
          assert.equal(e.codeName, "PERMISSION_DENIED");
          assert.equal(e.code, status.PERMISSION_DENIED);
          assert.match(e.details, /^Reset is disabled/);
          assert.equal(e.message, `PERMISSION_DENIED: ${e.details}`);
          return true;
        });
      }
    } finally {
      anonymous.close();
      withToken.close();
      await server.stop();
    }
  });
});
