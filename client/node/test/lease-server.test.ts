// The lease calls against a real server, with an inline concurrency limit.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { RateLimitClient } from "@ratelimit/client";

import { startServer, type RunningServer } from "./support.js";

let server: RunningServer;
let client: RateLimitClient;
before(async () => {
  server = await startServer({ adminToken: "tok" });
  client = new RateLimitClient(server.target, { adminToken: "tok" });
});
after(async () => {
  client.close();
  await server.stop();
});

test("a held lease against the server: denied beyond capacity, kept by its heartbeat, released", async () => {
  const config = { kind: "CONCURRENCY", capacity: 1 } as const;
  const limits = [{ name: "jobs", key: "k", config }];
  {
    await using lease = await client.lease({ limits, ttlMs: 900, holder: "pod-a" });
    const denied = await client.acquire({ limits });
    assert.equal(denied.allowed, false);
    assert.equal(denied.reason, "NO_FREE_SLOTS");
    await new Promise((r) => setTimeout(r, 1200)); // past the TTL: the heartbeat keeps it
    const listed = await client.listLeases({ name: "jobs", key: "k", source: "INLINE", config });
    assert.equal(listed.held, 1);
    assert.deepEqual(listed.leases.map((l) => [l.id, l.holder]), [[lease.id, "pod-a"]]);
    assert.equal(lease.lost, false);
  }
  const after = await client.listLeases({ name: "jobs", key: "k", source: "INLINE", config });
  assert.equal(after.held, 0);
});

test("listLeases with an inline config and no source lists the inline limit's leases", async () => {
  // The server refuses a config with source LIMITS_FILE: a config is sent with source INLINE.
  const config = { kind: "CONCURRENCY", capacity: 2 } as const;
  const limits = [{ name: "jobs-unsourced", key: "k", config }];
  const lease = await client.lease({ limits, heartbeatMs: 0, holder: "pod-b" });
  try {
    const listed = await client.listLeases({ name: "jobs-unsourced", key: "k", config });
    assert.deepEqual([listed.held, listed.capacity], [1, 2]);
    assert.deepEqual(listed.leases.map((l) => [l.id, l.source, l.holder]), [[lease.id, "INLINE", "pod-b"]]);
  } finally {
    assert.equal((await lease.release()).state, "RELEASED");
  }
  assert.equal((await client.listLeases({ name: "jobs-unsourced", key: "k", config })).held, 0);
});
