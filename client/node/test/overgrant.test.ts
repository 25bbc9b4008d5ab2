// 64 concurrent callers consume from one key; the tokens granted never exceed what the bucket can
// give over the run: capacity + rate·T/period, T measured around the whole run (so it contains the
// server's interval).
import assert from "node:assert/strict";
import { test } from "node:test";

import { RateLimitClient, type LimitConfig } from "@ratelimit/client";

import { startServer } from "./support.js";

test("64 callers on one key are never over-granted", async (t) => {
  const server = await startServer();
  // 4 channels shared by 64 callers, as a multi-process deployment would have several.
  const clients = Array.from({ length: 4 }, () => new RateLimitClient(server.target, { timeoutMs: 10_000 }));
  const config: LimitConfig = { kind: "TOKEN_BUCKET", rate: 5, periodMs: 1000, capacity: 20 };
  const callers = 64;
  const callsEach = 25;
  try {
    let granted = 0;
    let denied = 0;
    const start = Date.now();
    await Promise.all(
      Array.from({ length: callers }, async (_, i) => {
        const client = clients[i % clients.length]!;
        for (let c = 0; c < callsEach; c++) {
          const r = await client.consume({ name: "overgrant", key: "shared", config });
          if (r.allowed) granted++;
          else denied++;
        }
      }),
    );
    const elapsedMs = Date.now() - start;
    const bound = config.capacity! + (config.rate * elapsedMs) / config.periodMs;
    t.diagnostic(`granted ${granted} of ${callers * callsEach} in ${elapsedMs} ms; bound ${bound.toFixed(1)}`);
    assert.equal(granted + denied, callers * callsEach);
    assert.ok(granted >= config.capacity!, `granted ${granted}: at least the full bucket`);
    assert.ok(granted <= bound, `granted ${granted} > bound ${bound} over ${elapsedMs} ms`);
    assert.ok(denied > 0, "the run was contended");
  } finally {
    for (const c of clients) c.close();
    await server.stop();
  }
});
