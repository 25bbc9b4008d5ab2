// Overrides (ratelimit.v1.OverrideService) against a real ratelimit-server: a raise the
// decisions use and name, a blocked key, paging, the audit, a delete, bad input and credentials.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { RateLimitClient, RateLimitError, status, type OverrideTarget } from "@ratelimit/client";

import { startServer, type RunningServer } from "./support.js";

const TOKEN = "s3cret";
// Both limits refill one token an hour, so nothing refills during a test.
const LIMITS = `limits:
  - name: api
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 3
  - name: other
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 10
`;

// Each test uses a limit of its own ("api" or "other") or keys of its own, so that the server
// can be shared: one server start for the whole file.
describe("overrides", () => {
  let server: RunningServer;
  let admin: RateLimitClient;

  before(async () => {
    server = await startServer({ limits: LIMITS, adminToken: TOKEN });
    admin = new RateLimitClient(server.target, { adminToken: TOKEN, timeoutMs: 10_000 });
  });
  after(async () => {
    admin?.close();
    await server?.stop();
  });

  test("an override raises a limit until it is deleted, and the audit records each change", async () => {
    // Over the configured capacity (3) a count can never fit...
    const denied = await admin.consume({ name: "api", key: "cust-1", count: 5 });
    assert.equal(denied.reason, "COUNT_EXCEEDS_CAPACITY");
    assert.equal(denied.results[0]!.override, undefined);
    const target: OverrideTarget = { name: "api", key: "cust-1" };
    const made = await admin.setOverride({ target, limit: { capacity: 10 }, reason: "incident 811", actor: "alice" });
    assert.equal(made.replaced, undefined);
    assert.deepEqual(made.override.target, { source: "LIMITS_FILE", name: "api", key: "cust-1" });
    assert.deepEqual(made.override.limit, { capacity: 10 });
    assert.equal(made.override.unlimited, false);
    assert.equal(made.override.blocked, false);
    assert.equal(made.override.setBy, "alice (token)");
    assert.ok(made.override.setAt instanceof Date);
    assert.equal(made.override.expiresAt, undefined);
    // ...and under the override it does; the decision names the override.
    const allowed = await admin.consume({ name: "api", key: "cust-1", count: 5 });
    assert.equal(allowed.allowed, true);
    assert.equal(allowed.results[0]!.override, "cust-1");
    assert.equal(allowed.results[0]!.capacity, 10);
    assert.equal((await admin.consume({ name: "api", key: "cust-2", count: 5 })).allowed, false);

    const again = await admin.setOverride({ target, limit: { capacity: 20 }, reason: "more", actor: "bob" });
    assert.deepEqual(again.replaced, made.override);
    assert.deepEqual(await admin.getOverride(target), again.override);

    assert.deepEqual(await admin.deleteOverride({ target, reason: "incident over", actor: "carol" }), again.override);
    const back = await admin.consume({ name: "api", key: "cust-1" });
    assert.equal(back.results[0]!.override, undefined);
    assert.equal(back.results[0]!.capacity, 3);
    await assert.rejects(admin.getOverride(target), (e: unknown) => e instanceof RateLimitError && e.code === status.NOT_FOUND);

    const entries = [];
    for await (const e of admin.allOverrideAudit({ name: "api", pageSize: 2 })) entries.push(e);
    assert.deepEqual(
      entries.map((e) => [e.action, e.actor, e.reason]),
      [["delete", "carol", "incident over"], ["set", "bob", "more"], ["set", "alice", "incident 811"]],
    );
    assert.ok(entries.every((e) => e.authorizedBy === "token" && e.peer !== "" && e.at instanceof Date));
    assert.ok(entries[0]!.sequence > entries[1]!.sequence && entries[1]!.sequence > entries[2]!.sequence);
    assert.deepEqual(entries[0]!.before, again.override);
    assert.equal(entries[0]!.after, undefined);
    assert.equal(entries[2]!.before, undefined);
    assert.deepEqual(entries[2]!.after, made.override);
  });

  test("a blocked key is denied with reason BLOCKED and no retry time; an unlimited one takes any count", async () => {
    const start = Date.now();
    const made = await admin.setOverride({
      target: { name: "api", keyPattern: "leaked-*" },
      blocked: true,
      expiresInMs: 2 * 3_600_000,
      reason: "keys leaked",
    });
    assert.equal(made.override.blocked, true);
    assert.equal(made.override.limit, undefined);
    const expires = made.override.expiresAt!.getTime();
    assert.ok(expires >= start + 2 * 3_600_000 && expires <= Date.now() + 2 * 3_600_000 + 1, String(made.override.expiresAt));
    const r = await admin.consume({ name: "api", key: "leaked-7" });
    assert.equal(r.allowed, false);
    assert.equal(r.reason, "BLOCKED");
    assert.equal(r.deniedBy, 0);
    assert.equal(r.retryAt, undefined);
    assert.equal(r.results[0]!.reason, "BLOCKED");
    assert.equal(r.results[0]!.retryAt, undefined);
    assert.equal(r.results[0]!.override, "leaked-*");
    assert.equal((await admin.consume({ name: "api", key: "fine-7" })).allowed, true);

    await admin.setOverride({ target: { name: "api", key: "vip" }, unlimited: true });
    const vip = await admin.consume({ name: "api", key: "vip", count: 1000 });
    assert.equal(vip.allowed, true);
    assert.equal(vip.results[0]!.override, "vip");
  });

  test("overrides and the audit are listed page by page", async () => {
    for (const k of ["k0", "k1", "k2", "k3", "k4"]) {
      await admin.setOverride({ target: { name: "other", key: k }, limit: { rate: 2, periodMs: 60_000 } });
    }
    const first = await admin.listOverrides({ name: "other", pageSize: 2 });
    assert.deepEqual(first.overrides.map((o) => o.target.key), ["k0", "k1"]);
    assert.notEqual(first.nextPageToken, "");
    assert.deepEqual(first.overrides[0]!.limit, { rate: 2, periodMs: 60_000 });
    const second = await admin.listOverrides({ name: "other", pageSize: 2, pageToken: first.nextPageToken });
    assert.deepEqual(second.overrides.map((o) => o.target.key), ["k2", "k3"]);
    const keys = [];
    for await (const o of admin.allOverrides({ name: "other", pageSize: 2 })) keys.push(o.target.key);
    assert.deepEqual(keys, ["k0", "k1", "k2", "k3", "k4"]);

    const page = await admin.listOverrideAudit({ name: "other", pageSize: 3 });
    assert.deepEqual(page.entries.map((e) => e.after?.target.key), ["k4", "k3", "k2"]);
    assert.notEqual(page.nextPageToken, "");
    const rest = await admin.listOverrideAudit({ name: "other", pageSize: 3, pageToken: page.nextPageToken });
    assert.deepEqual(rest.entries.map((e) => e.after?.target.key), ["k1", "k0"]);
    assert.equal(rest.nextPageToken, "");
  });

  test("bad input is INVALID_ARGUMENT naming the field; a missing or wrong token is refused", async () => {
    const target = { name: "other", key: "bad" };
    await assert.rejects(admin.setOverride({ target, limit: { rate: -1 } }), (e: unknown) => {
      assert.ok(e instanceof RateLimitError);
      assert.equal(e.code, status.INVALID_ARGUMENT);
      assert.equal(e.field, "override.limit.rate");
      return true;
    });
    await assert.rejects(admin.setOverride({ target }), (e: unknown) => e instanceof RateLimitError && e.field === "override.effect");
    await assert.rejects(
      admin.setOverride({ target: { name: "other", key: "a", keyPattern: "a*" }, blocked: true }),
      (e: unknown) => e instanceof RateLimitError && e.field === "override.target.key_pattern",
    );
    await assert.rejects(admin.listOverrides({ pageSize: 5000 }), (e: unknown) => e instanceof RateLimitError && e.field === "page_size");
    await assert.rejects(admin.setOverride({ target: { name: "nope", key: "k" }, blocked: true }), (e: unknown) => e instanceof RateLimitError && e.code === status.NOT_FOUND);
    await assert.rejects(admin.setOverride({ target, blocked: true, unlimited: true }), TypeError);

    const saved = process.env.RATELIMIT_ADMIN_TOKEN;
    delete process.env.RATELIMIT_ADMIN_TOKEN;
    const anonymous = new RateLimitClient(server.target, { timeoutMs: 10_000 });
    const wrong = new RateLimitClient(server.target, { adminToken: "nope", timeoutMs: 10_000 });
    if (saved !== undefined) process.env.RATELIMIT_ADMIN_TOKEN = saved;
    try {
      await assert.rejects(anonymous.setOverride({ target, blocked: true }), (e: unknown) => e instanceof RateLimitError && e.code === status.UNAUTHENTICATED);
      await assert.rejects(wrong.listOverrideAudit(), (e: unknown) => e instanceof RateLimitError && e.code === status.PERMISSION_DENIED);
    } finally {
      anonymous.close();
      wrong.close();
    }
    await assert.rejects(admin.getOverride(target), (e: unknown) => e instanceof RateLimitError && e.code === status.NOT_FOUND);
  });
});
