// The README's lease example is runJob below, verbatim, and it runs against the fake of the
// lease calls.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { LeaseDeniedError, RateLimitClient } from "@ratelimit/client";

import { FakeLeases } from "./lease-fake.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The job the example runs while it holds its slot; the tests replace it. */
let work = async (signal: AbortSignal): Promise<string> => (signal.aborted ? "lost" : "done");

async function runJob(client: RateLimitClient, tenant: string): Promise<string> {
  const jobs = { kind: "CONCURRENCY", capacity: 5 } as const; // or a limits-file name
  try {
    await using lease = await client.lease({
      limits: [{ name: "jobs", key: tenant, config: jobs }],
      holder: "worker-1",
    });
    return await work(lease.signal); // at most 5 at once per tenant; aborted if the lease is lost
  } catch (e) {
    if (e instanceof LeaseDeniedError) return `no free slot, retry in ${e.retryAfterMs} ms`;
    throw e;
  }
}

test("the README's lease example is runJob of this file", () => {
  const readme = readFileSync(join(here, "..", "README.md"), "utf8");
  const block = /<!-- test: lease example[^\n]*\n```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, "README.md has no lease example block");
  const source = readFileSync(join(here, "..", "test", "readme.test.ts"), "utf8");
  assert.ok(source.includes(block[1]!), `the README's example is not runJob:\n${block[1]}`);
});

test("the README's lease example holds a slot while it works, then releases it", async () => {
  const fake = await new FakeLeases(0).start();
  const client = new RateLimitClient(fake.target);
  try {
    let during = -1;
    work = async () => {
      during = fake.held("jobs", "t1");
      return "done";
    };
    assert.equal(await runJob(client, "t1"), "done");
    assert.equal(during, 1);
    assert.equal(fake.held("jobs", "t1"), 0);
    assert.equal(fake.acquires[0]!.holder, "worker-1");
    for (let i = 0; i < 5; i++) {
      await client.acquire({ limits: [{ name: "jobs", key: "t1", config: { kind: "CONCURRENCY", capacity: 5 } }] });
    }
    assert.match(await runJob(client, "t1"), /^no free slot, retry in \d/);
  } finally {
    client.close();
    await fake.stop();
  }
});
