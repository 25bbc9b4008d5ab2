// The CommonJS build: require() gives the same API, and it works against a server.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

import * as esm from "@ratelimit/client";

import { startServer } from "./support.js";

const require = createRequire(import.meta.url);

test("require() loads the CommonJS build, which talks to the server", async () => {
  const cjs = require("@ratelimit/client") as typeof esm;
  assert.match(require.resolve("@ratelimit/client"), /dist[\\/]cjs[\\/]index\.js$/);
  assert.notEqual(cjs.RateLimitClient, esm.RateLimitClient, "a separate build, not the ES module");
  assert.equal(typeof cjs.rateLimit, "function");
  assert.equal(cjs.DEFAULT_TIMEOUT_MS, esm.DEFAULT_TIMEOUT_MS);
  const server = await startServer();
  const client = new cjs.RateLimitClient(server.target, { timeoutMs: 10_000 });
  try {
    const r = await client.consume({
      name: "cjs",
      key: "k",
      config: { kind: "TOKEN_BUCKET", rate: 1, periodMs: 60_000 },
    });
    assert.equal(r.allowed, true);
    await assert.rejects(client.consume({ name: "cjs", key: "" }), (e: unknown) => e instanceof cjs.RateLimitError && e.field === "limits[0].key");
  } finally {
    client.close();
    await server.stop();
  }
});
