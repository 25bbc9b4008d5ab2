// Conversions and error parsing, without a server.
import assert from "node:assert/strict";
import { test } from "node:test";

import { RateLimitError, sleepUntil, status } from "@ratelimit/client";

import {
  dateFromTimestamp,
  durationFromMs,
  msFromDuration,
  rateLimitResult,
  wireRateLimitRequest,
  wireSetOverrideRequest,
  type WireRateLimitResponse,
} from "../dist/esm/convert.js";

test("durations in ms keep sub-millisecond precision", () => {
  assert.deepEqual(durationFromMs(1500, "f"), { seconds: "1", nanos: 500_000_000 });
  assert.deepEqual(durationFromMs(0.001, "f"), { seconds: "0", nanos: 1000 });
  assert.deepEqual(durationFromMs(3_600_000, "f"), { seconds: "3600", nanos: 0 });
  assert.deepEqual(durationFromMs(-1500, "f"), { seconds: "-1", nanos: -500_000_000 });
  assert.equal(msFromDuration({ seconds: "2", nanos: 250_000 }), 2000.25);
  assert.throws(() => durationFromMs(Number.NaN, "limits[0].config.periodMs"), /^TypeError: limits\[0\]\.config\.periodMs: /);
});

test("a Timestamp becomes a Date rounded up to the millisecond, never earlier", () => {
  assert.equal(dateFromTimestamp({ seconds: "10", nanos: 0 }).getTime(), 10_000);
  assert.equal(dateFromTimestamp({ seconds: "10", nanos: 1 }).getTime(), 10_001);
  assert.equal(dateFromTimestamp({ seconds: "10", nanos: 999_999_999 }).getTime(), 11_000);
  // The protocol's "not in practice": 9999-12-31T23:59:59.999999999Z.
  assert.equal(dateFromTimestamp({ seconds: "253402300799", nanos: 999_999_999 }).toISOString(), "+010000-01-01T00:00:00.000Z");
});

test("requestId and omitReceipts reach the wire request", () => {
  const limits = [{ name: "n", key: "k" }];
  assert.deepEqual(wireRateLimitRequest({ limits }), { limits, request_id: "", omit_receipts: false });
  assert.deepEqual(
    wireRateLimitRequest({ limits, requestId: "r1", omitReceipts: true }),
    { limits, request_id: "r1", omit_receipts: true },
  );
});

test("RateLimitError names a field only for the codes of a bad field, and only a field path", () => {
  for (const code of [status.INVALID_ARGUMENT, status.NOT_FOUND, status.FAILED_PRECONDITION, status.ALREADY_EXISTS, status.PERMISSION_DENIED]) {
    assert.equal(new RateLimitError(code, "entries[2].limits[0].config.rate: must be > 0").field, "entries[2].limits[0].config.rate");
  }
  // The server's messages of other codes are not about a field, even when they start alike.
  assert.equal(new RateLimitError(status.UNAVAILABLE, "redis: slot 5 is not served by any primary").field, undefined);
  assert.equal(new RateLimitError(status.UNKNOWN, "limits[0].key: must not be empty").field, undefined);
  assert.equal(new RateLimitError(status.INTERNAL, "Request message serialization failure: limits: bad").field, undefined);
  // Nor is a message whose first word is no field path (fields are lower-case proto names).
  assert.equal(new RateLimitError(status.PERMISSION_DENIED, "Reset: administration is disabled").field, undefined);
  assert.equal(new RateLimitError(status.INVALID_ARGUMENT, "Error: upstream refused").field, undefined);
  assert.equal(new RateLimitError(status.INVALID_ARGUMENT, "request body is not a valid ratelimit.v1.RateLimitRequest").field, undefined);
});

test("RateLimitError keeps the code and the field the message names", () => {
  const e = new RateLimitError(status.INVALID_ARGUMENT, "limits[1].config.rate: must be > 0, got -5");
  assert.ok(e instanceof Error);
  assert.equal(e.name, "RateLimitError");
  assert.equal(e.codeName, "INVALID_ARGUMENT");
  assert.equal(e.field, "limits[1].config.rate");
  assert.equal(e.message, "INVALID_ARGUMENT: limits[1].config.rate: must be > 0, got -5");
  assert.equal(new RateLimitError(status.UNAVAILABLE, "connection refused (127.0.0.1:1)").field, undefined);
  assert.equal(new RateLimitError(status.UNAVAILABLE, "x").unavailable, true);
  assert.equal(new RateLimitError(status.DEADLINE_EXCEEDED, "x").unavailable, true);
  assert.equal(new RateLimitError(status.NOT_FOUND, "x").unavailable, false);
});

test("sleepUntil resolves no earlier than the time, and at once for a past time", async () => {
  const when = new Date(Date.now() + 50);
  await sleepUntil(when);
  assert.ok(Date.now() >= when.getTime());
  await sleepUntil(new Date(0));
  const controller = new AbortController();
  const far = sleepUntil(new Date(Date.now() + 3_600_000), controller.signal);
  controller.abort();
  await assert.rejects(far, (e: Error) => e.name === "AbortError");
});

test("BLOCKED and the override are read; a reason this client does not know is absent", () => {
  const wire = (reason: string, override: string): WireRateLimitResponse => ({
    allowed: false,
    results: [{ name: "api", key: "k", allowed: false, value: 1, capacity: 3, reason, override }],
    reason,
    denied_by: 0,
    failed_open: false,
    replayed: false,
  });
  const blocked = rateLimitResult(wire("BLOCKED", "k*"));
  assert.equal(blocked.reason, "BLOCKED");
  assert.equal(blocked.results[0]!.reason, "BLOCKED");
  assert.equal(blocked.results[0]!.override, "k*");
  // proto-loader gives an enum value it does not know as its number.
  const future = rateLimitResult(wire(99 as unknown as string, ""));
  assert.equal(future.allowed, false);
  assert.equal(future.reason, undefined);
  assert.equal(future.results[0]!.reason, undefined);
  assert.equal(future.results[0]!.override, undefined);
});

test("a set override's effect and expiry reach the wire request", () => {
  const target = { name: "api", keyPattern: "trial-*" };
  assert.deepEqual(wireSetOverrideRequest({ target, limit: { rate: 2, periodMs: 1500 }, actor: "a" }), {
    override: {
      target: { source: "LIMITS_FILE", name: "api", key: "", key_pattern: "trial-*", envoy_path: [] },
      reason: "",
      limit: { rate: 2, period: { seconds: "1", nanos: 500_000_000 } },
    },
    actor: "a",
  });
  const blocked = wireSetOverrideRequest({ target, blocked: true, expiresInMs: 2500 }, 10_000) as {
    override: Record<string, unknown>;
  };
  assert.equal(blocked.override.blocked, true);
  assert.deepEqual(blocked.override.expires_at, { seconds: "12", nanos: 500_000_000 });
  assert.throws(() => wireSetOverrideRequest({ target, limit: {}, unlimited: true }), TypeError);
  assert.throws(() => wireSetOverrideRequest({ target, blocked: true, expiresAt: new Date(), expiresInMs: 1 }), TypeError);
});
