// batch: independent requests in one call, each answered on its own, in order.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { RateLimitClient, RateLimitError, status, type LimitConfig } from "@ratelimit/client";

import { startServer, type RunningServer } from "./support.js";

const HOURLY: LimitConfig = { kind: "TOKEN_BUCKET", rate: 10, periodMs: 3_600_000, capacity: 10 };

describe("batch", () => {
  let server: RunningServer;
  let client: RateLimitClient;

  before(async () => {
    server = await startServer();
    client = new RateLimitClient(server.target, { timeoutMs: 10_000 });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("answers each entry in order, with its own error for an invalid one", async () => {
    const k = `b-${Date.now()}`;
    const results = await client.batch([
      { request: { name: "batch", key: k, count: 6, config: HOURLY } },
      { method: "CONSUME", request: { name: "batch", key: k, count: 6, config: HOURLY } },
      { request: { name: "batch", key: k, count: -1, config: HOURLY } },
      { method: "CHECK", request: { name: "batch", key: k, count: 1, config: HOURLY } },
      { method: "RESERVE", request: { name: "batch", key: k, count: 6, config: HOURLY } },
    ]);
    assert.equal(results.length, 5);
    assert.equal(results[0]!.result?.allowed, true);
    assert.ok((results[0]!.result?.results[0]!.receipt?.length ?? 0) > 0, "a receipt per allowed take");
    assert.equal(results[1]!.result?.allowed, false, "the second sees the first's take");
    const error = results[2]!.error;
    assert.ok(error instanceof RateLimitError);
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.equal(error.field, "entries[2].limits[0].count");
    assert.equal(results[2]!.result, undefined);
    assert.ok(Math.abs(results[3]!.result!.results[0]!.value - 4) < 0.01);
    assert.equal(results[4]!.result?.allowed, true);
    assert.ok(Math.abs(results[4]!.result!.results[0]!.value + 2) < 0.01, "a reservation into debt");
  });

  test("omitReceipts applies to its own entry only", async () => {
    const k = `bo-${Date.now()}`;
    const results = await client.batch([
      { request: { limits: [{ name: "batch_omit", key: k, count: 2, config: HOURLY }], omitReceipts: true } },
      { request: { name: "batch_omit", key: k, count: 3, config: HOURLY } },
      { method: "RESERVE", request: { limits: [{ name: "batch_omit", key: k, count: 1, config: HOURLY }], omitReceipts: true } },
    ]);
    assert.equal(results[0]!.result?.allowed, true);
    assert.equal(results[0]!.result?.results[0]!.receipt, undefined, "no receipt for the entry that omits it");
    assert.ok(Math.abs(results[0]!.result!.results[0]!.value - 8) < 0.01, "the entry still took its tokens");
    assert.equal(results[1]!.result?.allowed, true);
    assert.ok((results[1]!.result?.results[0]!.receipt?.length ?? 0) > 0, "a receipt for the entry without it");
    assert.equal(results[2]!.result?.allowed, true);
    assert.equal(results[2]!.result?.results[0]!.receipt, undefined, "no receipt for a reserve that omits it");
    assert.ok(Math.abs(results[2]!.result!.results[0]!.value - 4) < 0.01);
  });

  test("a method the service does not have is refused before sending, not sent as a consume", async () => {
    const k = `bm-${Date.now()}`;
    await assert.rejects(
      client.batch([{ method: "check" as never, request: { name: "batch", key: k, count: 3, config: HOURLY } }]),
      (e: unknown) => e instanceof TypeError && /^entries\[0\]\.method: must be CONSUME, CHECK or RESERVE, got "check"$/.test(e.message),
    );
    const [checked] = await client.batch([{ method: "CHECK", request: { name: "batch", key: k, count: 1, config: HOURLY } }]);
    assert.ok(Math.abs(checked!.result!.results[0]!.value - 10) < 0.01, "nothing was taken");
  });

  test("a batch without entries is refused as a whole", async () => {
    await assert.rejects(client.batch([]), (e: unknown) => {
      assert.ok(e instanceof RateLimitError);
      assert.equal(e.code, status.INVALID_ARGUMENT);
      assert.equal(e.field, "entries");
      return true;
    });
  });
});
