// Settle, receipts, request_id and replayed: they need a server that implements Settle.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { InterceptingCall, type ChannelOptions, type Interceptor } from "@grpc/grpc-js";
import { RateLimitClient, RateLimitError, type LimitConfig } from "@ratelimit/client";

import { startServer, type RunningServer } from "./support.js";

const HOURLY: LimitConfig = { kind: "TOKEN_BUCKET", rate: 10, periodMs: 3_600_000, capacity: 10 };

function near(actual: number, expected: number, what = "value"): void {
  assert.ok(Math.abs(actual - expected) < 0.01, `${what}: ${actual}, expected about ${expected}`);
}

describe("settle", () => {
  let server: RunningServer;
  let client: RateLimitClient;
  let n = 0;
  const key = () => `s${++n}-${Date.now()}`;
  const balance = async (name: string, k: string) =>
    (await client.check({ name, key: k, config: HOURLY })).results[0]!.value;

  before(async () => {
    server = await startServer();
    client = new RateLimitClient(server.target, { timeoutMs: 10_000 });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("settle gives back what a consume did not use, once", async () => {
    const k = key();
    const taken = await client.consume({ name: "settle", key: k, count: 4, config: HOURLY });
    assert.equal(taken.allowed, true);
    const receipt = taken.results[0]!.receipt;
    assert.ok(receipt instanceof Uint8Array && receipt.length > 0, "an allowed consume carries a receipt");
    const [settled] = await client.settle([{ receipt, used: 1 }]);
    assert.equal(settled!.name, "settle");
    assert.equal(settled!.key, k);
    near(settled!.returned, 3, "returned");
    assert.equal(settled!.charged, 0);
    near(settled!.value, 9);
    near(await balance("settle", k), 9);
    await assert.rejects(
      client.settle([{ receipt, used: 0 }]),
      (e: unknown) => e instanceof RateLimitError && e.field === "settlements[0].receipt",
    );
    near(await balance("settle", k), 9, "a refused settlement changes nothing");
  });

  test("settle charges what was used beyond the count", async () => {
    const k = key();
    const taken = await client.consume({ name: "settle_more", key: k, count: 2, config: HOURLY });
    const [settled] = await client.settle([{ receipt: taken.results[0]!.receipt!, used: 15 }]);
    near(settled!.charged, 13, "charged");
    near(settled!.value, -5);
    assert.ok(settled!.paidAt instanceof Date && settled!.paidAt.getTime() > Date.now(), "a debt has a paidAt");
  });

  test("omitReceipts: an allowed consume has no receipt but still takes the tokens", async () => {
    const k = key();
    const bare = await client.consume({
      limits: [{ name: "omit", key: k, count: 3, config: HOURLY }],
      omitReceipts: true,
    });
    assert.equal(bare.allowed, true);
    assert.equal(bare.results[0]!.receipt, undefined, "no receipt when omitted");
    near(bare.results[0]!.value, 7);
    near(await balance("omit", k), 7, "the tokens were taken");
    const withReceipt = await client.consume({ limits: [{ name: "omit", key: k, count: 2, config: HOURLY }] });
    assert.equal(withReceipt.allowed, true);
    assert.ok((withReceipt.results[0]!.receipt?.length ?? 0) > 0, "a receipt without the option");
    near(await balance("omit", k), 5);
  });

  test("a retried consume with the same requestId is replayed, not taken twice", async () => {
    const k = key();
    const request = { limits: [{ name: "idem", key: k, count: 3, config: HOURLY }], requestId: `req-${k}` };
    const first = await client.consume(request);
    const again = await client.consume(request);
    assert.equal(first.replayed, false);
    assert.equal(again.replayed, true);
    assert.equal(again.allowed, true);
    near(await balance("idem", k), 7, "taken once");
  });

  // Reserves 5 of the 10 tokens left under `name` with reserveAndWait (with `omitReceipts` as
  // given), aborts it while it waits for the reservation, and expects the reservation given back.
  async function abortWhileWaiting(name: string, omitReceipts: boolean): Promise<void> {
    const k = key();
    await client.consume({ name, key: k, count: 10, config: HOURLY });
    const controller = new AbortController();
    // Cancelled while it waits for its reservation: once the reply (and its receipt) arrived.
    // (The balance alone would not say that: it shows the reservation as soon as the server has
    // decided it, before the reply reaches the client.)
    let sleeping!: () => void;
    const asleep = new Promise<void>((resolve) => (sleeping = resolve));
    const waiting = client.reserveAndWait(
      { limits: [{ name, key: k, count: 5, config: HOURLY }], omitReceipts },
      {
        signal: controller.signal,
        sleepUntil: (_when, signal) =>
          new Promise<void>((_resolve, reject) => {
            signal?.addEventListener("abort", () => reject(signal.reason));
            sleeping();
          }),
      },
    );
    await asleep;
    near(await balance(name, k), -5, "the reservation");
    controller.abort();
    await assert.rejects(waiting, (e: Error) => e.name === "AbortError");
    near(await balance(name, k), 0, "the reservation was given back");
  }

  test("reserveAndWait cancelled by its signal settles the reservation with used 0", async () => {
    await abortWhileWaiting("cancel_settle", false);
  });

  test("reserveAndWait asks for receipts even when the request omits them, and gives the reservation back", async () => {
    await abortWhileWaiting("cancel_quiet", true);
  });

  test("reserveAndWait aborted while its Reserve is in flight leaves no reservation", async () => {
    const k = key();
    await client.consume({ name: "abort_reserve", key: k, count: 10, config: HOURLY });
    const controller = new AbortController();
    // The first Reserve reaches the server and is decided; the signal aborts as its answer
    // arrives, before the client reads it: an abort that races the reply.
    let reserves = 0;
    const abortOnFirstReserveAnswer: Interceptor = (options, nextCall) =>
      new InterceptingCall(nextCall(options), {
        start(metadata, _listener, next) {
          next(metadata, {
            onReceiveMessage(message, nextMessage) {
              if (options.method_definition.path.endsWith("/Reserve") && ++reserves === 1) {
                controller.abort();
              }
              nextMessage(message);
            },
          });
        },
      });
    const racing = new RateLimitClient(server.target, {
      timeoutMs: 10_000,
      channelOptions: { interceptors: [abortOnFirstReserveAnswer] } as ChannelOptions,
    });
    try {
      await assert.rejects(
        racing.reserveAndWait({ name: "abort_reserve", key: k, count: 5, config: HOURLY }, { signal: controller.signal }),
        (e: Error) => e.name === "AbortError",
      );
    } finally {
      racing.close();
    }
    assert.equal(reserves, 2, "the first Reserve, then the same one again (its remembered answer)");
    near(await balance("abort_reserve", k), 0, "the reservation was given back");
  });

  test("reserveAndWait with a signal already aborted, or a timeoutMs already spent, sends nothing", async () => {
    const k = key();
    const sent: string[] = [];
    const recordEveryCall: Interceptor = (options, nextCall) => {
      sent.push(options.method_definition.path);
      return new InterceptingCall(nextCall(options));
    };
    const recorded = new RateLimitClient(server.target, {
      timeoutMs: 10_000,
      channelOptions: { interceptors: [recordEveryCall] } as ChannelOptions,
    });
    const timedOut = AbortSignal.timeout(1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const request = { name: "aborted_before", key: k, count: 5, config: HOURLY };
    try {
      await assert.rejects(recorded.reserveAndWait(request, { signal: AbortSignal.abort(new Error("gave up")) }), /gave up/);
      await assert.rejects(recorded.reserveAndWait(request, { signal: timedOut }), (e: Error) => e.name === "TimeoutError");
      await assert.rejects(recorded.reserveAndWait(request, { timeoutMs: 0 }), /^TypeError: timeoutMs: /);
      await assert.rejects(recorded.reserveAndWait(request, { timeoutMs: -5 }), /^TypeError: timeoutMs: /);
    } finally {
      recorded.close();
    }
    assert.deepEqual(sent, [], "no Reserve, no Settle");
    near(await balance("aborted_before", k), 10, "nothing was reserved");
  });
});
