// Arguments the client refuses before any call, with a TypeError naming the field: strings that
// cannot be sent as UTF-8, lease TTLs the server would not take as given (0 too). The client points at
// an address nobody listens on: a request sent would fail UNAVAILABLE instead.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { RateLimitClient, RateLimitError, status } from "@ratelimit/client";

const ILL_FORMED = /: must be well-formed Unicode text, without a lone surrogate .*refused by the client, not sent$/;

/** Whether `e` is the client's refusal of the string at `field`. */
function refusesString(field: string): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof TypeError, String(e));
    assert.ok(e.message.startsWith(`${field}: `), e.message);
    assert.match(e.message, ILL_FORMED);
    return true;
  };
}

/** Whether `e` shows the request was sent (and found nobody). */
function wasSent(e: unknown): boolean {
  return e instanceof RateLimitError && e.code === status.UNAVAILABLE;
}

describe("client-side argument checks", () => {
  const client = new RateLimitClient("127.0.0.1:1", { timeoutMs: 5000 });
  after(() => client.close());
  const jobs = { name: "jobs", key: "k", config: { kind: "CONCURRENCY", capacity: 1 } } as const;

  test("a name, key, request id or holder with a lone surrogate is refused naming its field, not sent", async () => {
    await assert.rejects(client.consume({ name: "api", key: "\uDC00" }), refusesString("limits[0].key"));
    await assert.rejects(
      client.check({ limits: [{ name: "ok", key: "k" }, { name: "a\uD800", key: "k" }] }),
      refusesString("limits[1].name"),
    );
    await assert.rejects(client.reserve({ limits: [{ name: "n", key: "k" }], requestId: "r-\uDC00" }), refusesString("request_id"));
    // Half of an emoji, as slice leaves it.
    await assert.rejects(client.acquire({ limits: [jobs], holder: "pod-\u{1F600}".slice(0, 5) }), refusesString("holder"));
    await assert.rejects(
      client.batch([{ request: { name: "n", key: "k" } }, { method: "CHECK", request: { name: "n", key: "\uDC00x" } }]),
      refusesString("entries[1].limits[0].key"),
    );
    await assert.rejects(client.extend({ name: "jobs", key: "k", leaseId: "\uD800" }), refusesString("lease_id"));
    await assert.rejects(client.reset({ name: "n", key: "\uDC00" }), refusesString("key"));
    await assert.rejects(client.setOverride({ target: { name: "n", key: "\uDC00" }, unlimited: true }), refusesString("override.target.key"));
    // A whole surrogate pair is well-formed: sent.
    await assert.rejects(client.consume({ name: "api", key: "\u{1F600}" }), wasSent);
  });

  test("a lease TTL negative, under 1 ms or not finite is refused naming ttlMs and the value, not sent", async () => {
    for (const ttlMs of [0.5, 1e-7, -5, -0.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      const refused = (e: unknown) =>
        e instanceof TypeError && e.message.startsWith("ttlMs: ") && e.message.includes(`got ${String(ttlMs)};`);
      await assert.rejects(client.acquire({ limits: [jobs], ttlMs }), refused, `acquire, ${ttlMs}`);
      await assert.rejects(client.extend({ name: "jobs", key: "k", leaseId: "l1", ttlMs }), refused, `extend, ${ttlMs}`);
      await assert.rejects(client.lease({ limits: [jobs], ttlMs }), refused, `lease, ${ttlMs}`);
      await assert.rejects(client.withLease({ limits: [jobs], ttlMs }, () => "ran"), refused, `withLease, ${ttlMs}`);
    }
    // Past a Duration's range the seconds would be sent as another number: 1e300 ms became 1 s.
    await assert.rejects(client.acquire({ limits: [jobs], ttlMs: 1e300 }), /^TypeError: ttlMs: must be within a Duration's/);
    await assert.rejects(client.acquire({ limits: [jobs], ttlMs: 1 }), wasSent);
  });

  test("a lease TTL of 0 is refused like one under 1 ms, not sent for the server to refuse; unset is sent", async () => {
    for (const ttlMs of [0, -0]) {
      const refused = (e: unknown) =>
        e instanceof TypeError && e.message.startsWith("ttlMs: ") && e.message.includes("at least 1") && e.message.includes("got 0;");
      await assert.rejects(client.acquire({ limits: [jobs], ttlMs }), refused, `acquire, ${ttlMs}`);
      await assert.rejects(client.extend({ name: "jobs", key: "k", leaseId: "l1", ttlMs }), refused, `extend, ${ttlMs}`);
      await assert.rejects(client.lease({ limits: [jobs], ttlMs }), refused, `lease, ${ttlMs}`);
      await assert.rejects(client.withLease({ limits: [jobs], ttlMs }, () => "ran"), refused, `withLease, ${ttlMs}`);
    }
    // Unset: the limit's lease TTL, sent without a ttl.
    await assert.rejects(client.acquire({ limits: [jobs], ttlMs: undefined }), wasSent);
    await assert.rejects(client.extend({ name: "jobs", key: "k", leaseId: "l1" }), wasSent);
  });
});
