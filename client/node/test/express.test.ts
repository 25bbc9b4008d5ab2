// The Express middleware in a real Express app, against a real server.
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { after, before, describe, test } from "node:test";

import express, { type Request, type Response } from "express";

import { RateLimitClient, rateLimit, type RateLimitInfo, type RateLimitMiddlewareOptions } from "@ratelimit/client";

import { startServer, type RunningServer } from "./support.js";

const LIMITS = `limits:
  - name: pages
    kind: token_bucket
    rate: 2
    period: 1h
    capacity: 2
`;

async function serve(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
  const http: Server = await new Promise((resolve) => {
    const s = app.listen(0, "127.0.0.1", () => resolve(s));
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}

/** An app with the middleware in front of GET /. */
function appWith(options: RateLimitMiddlewareOptions<Request, Response>): express.Express {
  const app = express();
  app.use(rateLimit(options));
  app.get("/", (req, res) => {
    const info = (req as unknown as { rateLimit?: RateLimitInfo }).rateLimit;
    res.json({ ok: true, remaining: info?.remaining ?? null });
  });
  return app;
}

describe("Express middleware", () => {
  let server: RunningServer;
  let client: RateLimitClient;
  let n = 0;

  before(async () => {
    server = await startServer({ limits: LIMITS });
    client = new RateLimitClient(server.target, { timeoutMs: 10_000 });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("answers 200 with RateLimit headers, then 429 with Retry-After", async () => {
    const user = `u${++n}`;
    const web = await serve(appWith({ client, name: "pages", keyGenerator: () => user }));
    try {
      const r1 = await fetch(web.url);
      assert.equal(r1.status, 200);
      assert.equal(r1.headers.get("ratelimit-limit"), "2");
      assert.equal(r1.headers.get("ratelimit-remaining"), "1");
      assert.equal(r1.headers.get("retry-after"), null);
      assert.deepEqual(await r1.json(), { ok: true, remaining: 1 });

      const r2 = await fetch(web.url);
      assert.equal(r2.status, 200);
      assert.equal(r2.headers.get("ratelimit-remaining"), "0");

      const r3 = await fetch(web.url);
      assert.equal(r3.status, 429);
      assert.equal(await r3.text(), "Too many requests, please try again later.");
      assert.equal(r3.headers.get("ratelimit-limit"), "2");
      assert.equal(r3.headers.get("ratelimit-remaining"), "0");
      // One token at 2 per hour: 30 minutes.
      const retryAfter = Number(r3.headers.get("retry-after"));
      assert.ok(retryAfter > 29 * 60 && retryAfter <= 30 * 60, String(retryAfter));
      assert.equal(r3.headers.get("ratelimit-reset"), String(retryAfter));
    } finally {
      await web.close();
    }
  });

  test("windowMs and limit make an inline fixed window with a known reset and policy", async () => {
    const user = `u${++n}`;
    // 1000-day windows aligned to the epoch: no window boundary falls within the test.
    const windowMs = 1000 * 86_400_000;
    const web = await serve(appWith({ client, windowMs, limit: 1, keyGenerator: () => user, legacyHeaders: true }));
    try {
      const r1 = await fetch(web.url);
      assert.equal(r1.status, 200);
      assert.equal(r1.headers.get("ratelimit-policy"), "1;w=86400000");
      const untilBoundary = (windowMs - (Date.now() % windowMs)) / 1000;
      const reset = Number(r1.headers.get("ratelimit-reset"));
      assert.ok(Math.abs(reset - untilBoundary) <= 2, `${reset} vs ${untilBoundary}`);
      assert.equal(r1.headers.get("x-ratelimit-limit"), "1");
      assert.equal(r1.headers.get("x-ratelimit-remaining"), "0");
      const r2 = await fetch(web.url);
      assert.equal(r2.status, 429);
      const retryAfter = Number(r2.headers.get("retry-after"));
      assert.ok(Math.abs(retryAfter - untilBoundary) <= 2, `${retryAfter} vs ${untilBoundary}`);
    } finally {
      await web.close();
    }
  });

  test("keys are separate, skip is not counted, handler and statusCode answer the denial", async () => {
    const a = `a${++n}`;
    const b = `b${n}`;
    const web = await serve(
      appWith({
        client,
        name: "pages",
        keyGenerator: (req) => String(req.headers["x-user"]),
        skip: (req) => req.headers["x-skip"] === "1",
        handler: (_req, res, _next, options) => {
          res.status(options.statusCode).json({ error: "slow down" });
        },
        statusCode: 503,
      }),
    );
    try {
      for (let i = 0; i < 5; i++) {
        assert.equal((await fetch(web.url, { headers: { "x-user": a, "x-skip": "1" } })).status, 200);
      }
      assert.equal((await fetch(web.url, { headers: { "x-user": a } })).status, 200);
      assert.equal((await fetch(web.url, { headers: { "x-user": a } })).status, 200);
      const denied = await fetch(web.url, { headers: { "x-user": a } });
      assert.equal(denied.status, 503);
      assert.deepEqual(await denied.json(), { error: "slow down" });
      assert.equal((await fetch(web.url, { headers: { "x-user": b } })).status, 200, "another key has its own tokens");
    } finally {
      await web.close();
    }
  });

  test("draft-7 sends one RateLimit header; count weighs a request", async () => {
    const user = `u${++n}`;
    const web = await serve(
      appWith({ client, name: "pages", keyGenerator: () => user, standardHeaders: "draft-7", count: () => 2 }),
    );
    try {
      const r1 = await fetch(web.url);
      assert.equal(r1.status, 200);
      assert.equal(r1.headers.get("ratelimit"), "limit=2, remaining=0");
      assert.equal(r1.headers.get("ratelimit-limit"), null);
      const r2 = await fetch(web.url);
      assert.equal(r2.status, 429);
      assert.match(r2.headers.get("ratelimit")!, /^limit=2, remaining=0, reset=\d+$/);
    } finally {
      await web.close();
    }
  });

  test("an error other than unavailability reaches next(error)", async () => {
    const app = appWith({ client, name: "pages", keyGenerator: () => "" });
    app.use((err: unknown, _req: Request, res: Response, _next: unknown) => {
      res.status(500).json({ field: (err as { field?: string }).field });
    });
    const web = await serve(app);
    try {
      const r = await fetch(web.url);
      assert.equal(r.status, 500);
      assert.deepEqual(await r.json(), { field: "limits[0].key" });
    } finally {
      await web.close();
    }
  });
});

describe("Express middleware, application errors", () => {
  test("a failing keyGenerator reaches next(error), even with passOnStoreError", async () => {
    // No server is needed: the key is never computed, so the service is never asked.
    const client = new RateLimitClient("127.0.0.1:1");
    const app = appWith({
      client,
      name: "pages",
      passOnStoreError: true,
      keyGenerator: () => {
        throw new Error("no user");
      },
    });
    app.use((err: Error, _req: Request, res: Response, _next: unknown) => {
      res.status(500).json({ error: err.message });
    });
    const web = await serve(app);
    try {
      const r = await fetch(web.url);
      assert.equal(r.status, 500);
      assert.deepEqual(await r.json(), { error: "no user" });
    } finally {
      await web.close();
      client.close();
    }
  });
});

describe("Express middleware with the service stopped", () => {
  test("fails closed (503) by default and open with passOnStoreError", async () => {
    const server = await startServer({ limits: LIMITS });
    const client = new RateLimitClient(server.target, { timeoutMs: 5000 });
    const closed = await serve(appWith({ client, name: "pages", keyGenerator: () => "k" }));
    const open = await serve(appWith({ client, name: "pages", keyGenerator: () => "k2", passOnStoreError: true }));
    try {
      assert.equal((await fetch(closed.url)).status, 200);
      assert.equal((await fetch(open.url)).status, 200);
      await server.stop();
      const r = await fetch(closed.url);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("retry-after"), "1");
      const o = await fetch(open.url);
      assert.equal(o.status, 200);
      assert.deepEqual(await o.json(), { ok: true, remaining: null });
    } finally {
      await closed.close();
      await open.close();
      client.close();
      await server.stop();
    }
  });
});
