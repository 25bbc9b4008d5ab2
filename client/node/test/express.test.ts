// The Express middleware in a real Express app, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import express, { type Request, type Response } from "express";
import { InterceptingCall, type ChannelOptions, type Interceptor } from "@grpc/grpc-js";

import {
  RateLimitClient,
  RateLimitError,
  rateLimit,
  status,
  type RateLimitMiddlewareOptions,
} from "@ratelimit/client";

import { eventually, startServer, type RunningServer } from "./support.js";
import { appWith, serve } from "./express-app.js";

const LIMITS = `limits:
  - name: pages
    kind: token_bucket
    rate: 2
    period: 1h
    capacity: 2
`;

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
    const web = await serve(
      appWith({ client, name: "fixed-1", windowMs, limit: 1, keyGenerator: () => user, legacyHeaders: true }),
    );
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
    const config = { kind: "TOKEN_BUCKET", rate: -5, periodMs: 1000 } as const;
    const app = appWith({ client, name: "bad-config", config, keyGenerator: () => "k" });
    app.use((err: unknown, _req: Request, res: Response, _next: unknown) => {
      res.status(500).json({ field: (err as { field?: string }).field });
    });
    const web = await serve(app);
    try {
      const r = await fetch(web.url);
      assert.equal(r.status, 500);
      assert.deepEqual(await r.json(), { field: "limits[0].config.rate" });
    } finally {
      await web.close();
    }
  });

  test("a misspelt limit name is answered 500 and logged, whatever the failure mode", async () => {
    // Neither mode lets the requests through, and a custom fail-closed answer is not used either:
    // NOT_FOUND is a configuration error, not an outage.
    const variants: Array<Partial<RateLimitMiddlewareOptions<Request, Response>>> = [
      {},
      { failureMode: "open" },
      { passOnStoreError: true },
      { failureMode: "closed", storeErrorHandler: (_e, _req, res) => res.status(503).send("custom") },
    ];
    for (const variant of variants) {
      const lines: string[] = [];
      const errors: unknown[] = [];
      const app = appWith({
        client,
        name: "pagse",
        keyGenerator: () => "k",
        logger: { error: (line: string) => lines.push(line) },
        ...variant,
      });
      app.use((err: unknown, _req: Request, _res: Response, next: (e: unknown) => void) => {
        errors.push(err);
        next(err); // on to Express' own handler
      });
      const web = await serve(app);
      try {
        for (let i = 0; i < 5; i++) {
          const r = await fetch(web.url);
          assert.equal(r.status, 500, JSON.stringify(variant));
        }
        assert.equal(errors.length, 5);
        assert.ok(errors[0] instanceof RateLimitError && errors[0].code === status.NOT_FOUND, String(errors[0]));
        // One line for five alike (a line per interval at most, with the count of those left out).
        assert.equal(lines.length, 1, lines.join("\n"));
        assert.match(lines[0]!, /limit "pagse": NOT_FOUND: limits\[0\]\.name: .*pagse/);
      } finally {
        await web.close();
      }
    }
  });

  test("max in flight: no free slot is Retry-After 1, a rate limit's denial keeps the service's time", async () => {
    // One slot (the lease TTL: the server's 30 s default) and the limits file's 2 pages per hour.
    const user = `u${++n}`;
    let running = 0;
    let go!: () => void;
    const gate = new Promise<void>((r) => (go = r));
    const app = express();
    const slots = { inFlight: "in-flight-retry", inFlightConfig: { kind: "CONCURRENCY", capacity: 1 } } as const;
    app.use("/d6", rateLimit<Request, Response>({ client, name: "pages", ...slots, keyGenerator: () => user, legacyHeaders: true }));
    app.use("/d7", rateLimit<Request, Response>({ client, name: "pages", ...slots, keyGenerator: () => user, standardHeaders: "draft-7" }));
    app.get(["/d6", "/d7"], async (_req, res) => {
      running++;
      await gate;
      running--;
      res.send("done");
    });
    const web = await serve(app);
    try {
      const held = fetch(web.url + "/d6"); // takes the slot and a page
      await eventually(() => running === 1, 5000, "a request holding the slot");
      const noSlot = await fetch(web.url + "/d6");
      assert.equal(noSlot.status, 429);
      assert.equal(noSlot.headers.get("retry-after"), "1", "not the lease TTL (30 s)");
      assert.equal(noSlot.headers.get("ratelimit-reset"), "1");
      assert.equal(noSlot.headers.get("ratelimit-limit"), "1");
      const legacy = Number(noSlot.headers.get("x-ratelimit-reset"));
      assert.ok(Math.abs(legacy - (Date.now() / 1000 + 1)) <= 2, `X-RateLimit-Reset ${legacy}`);
      const draft7 = await fetch(web.url + "/d7");
      assert.equal(draft7.status, 429);
      assert.equal(draft7.headers.get("retry-after"), "1");
      assert.equal(draft7.headers.get("ratelimit"), "limit=1, remaining=0, reset=1");
      go();
      assert.equal((await held).status, 200);
      await eventually(() => running === 0, 5000, "the request done");
      // The slot comes back as the request ends: the second page, then the rate limit denies.
      let second: Awaited<ReturnType<typeof fetch>> | undefined;
      await eventually(async () => (second = await fetch(web.url + "/d6")).status !== 429, 5000, "the slot back");
      assert.equal(second!.status, 200);
      const noPage = await fetch(web.url + "/d6");
      assert.equal(noPage.status, 429);
      // One page at 2 per hour: 30 minutes, the service's time.
      const retryAfter = Number(noPage.headers.get("retry-after"));
      assert.ok(retryAfter > 29 * 60 && retryAfter <= 30 * 60, String(retryAfter));
      assert.equal(noPage.headers.get("ratelimit-reset"), String(retryAfter));
      assert.equal(noPage.headers.get("ratelimit-limit"), "2");
    } finally {
      go();
      await web.close();
    }
  });

  test("two routes with the same window and limit but their own names have their own counters", async () => {
    const user = `u${++n}`;
    const windowMs = 1000 * 86_400_000;
    const app = express();
    const limiter = (name: string) => rateLimit<Request, Response>({ client, name, windowMs, limit: 2, keyGenerator: () => user });
    app.get("/a", limiter("routes:/a"), (_req, res) => res.send("a"));
    app.get("/b", limiter("routes:/b"), (_req, res) => res.send("b"));
    const web = await serve(app);
    try {
      const statuses: number[] = [];
      for (const path of ["/a", "/a", "/b", "/a", "/b", "/b"]) statuses.push((await fetch(web.url + path)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429, 200, 429]);
    } finally {
      await web.close();
    }
  });
});

describe("Express middleware options", () => {
  const client = new RateLimitClient("127.0.0.1:1");
  after(() => client.close());

  test("the limit's name is required: without it rateLimit throws, naming the option", () => {
    // No default name: one derived from windowMs/limit made unrelated routes share a counter.
    // @ts-expect-error name is a required option
    assert.throws(() => rateLimit({ client, windowMs: 60_000, limit: 100 }), /"name" option is required/);
    assert.throws(() => rateLimit({ client, name: "" }), /"name" option is required/);
  });

  test("failureMode is one of two values, and the deprecated passOnStoreError cannot contradict it", () => {
    // @ts-expect-error the type admits "open" and "closed" only
    assert.throws(() => rateLimit({ client, name: "x", failureMode: "Open" }), /failureMode must be "open" or "closed"/);
    assert.throws(
      () => rateLimit({ client, name: "x", failureMode: "closed", passOnStoreError: true }),
      /failureMode "closed" contradicts passOnStoreError: true/,
    );
    assert.doesNotThrow(() => rateLimit({ client, name: "x", failureMode: "open", passOnStoreError: true }));
  });
});

describe("Express middleware, application errors", () => {
  test("a failing keyGenerator reaches next(error), even with failureMode open", async () => {
    // No server is needed: the key is never computed, so the service is never asked.
    const client = new RateLimitClient("127.0.0.1:1");
    const app = appWith({
      client,
      name: "pages",
      failureMode: "open",
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
  test("fails closed (503) by default, open with failureMode open (or the deprecated passOnStoreError)", async () => {
    const server = await startServer({ limits: LIMITS });
    const client = new RateLimitClient(server.target, { timeoutMs: 5000 });
    const lines: string[] = [];
    const logger = { error: (line: string) => lines.push(line) };
    const closed = await serve(appWith({ client, name: "pages", keyGenerator: () => "k", logger }));
    const open = await serve(appWith({ client, name: "pages", keyGenerator: () => "k2", failureMode: "open", logger }));
    const alias = await serve(appWith({ client, name: "pages", keyGenerator: () => "k3", passOnStoreError: true, logger }));
    try {
      for (const web of [closed, open, alias]) assert.equal((await fetch(web.url)).status, 200);
      await server.stop();
      const r = await fetch(closed.url);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("retry-after"), "1");
      for (const web of [open, alias]) {
        const o = await fetch(web.url);
        assert.equal(o.status, 200);
        assert.deepEqual(await o.json(), { ok: true, remaining: null });
      }
      assert.deepEqual(lines, [], "an outage follows the failure mode, it is not a configuration error");
    } finally {
      for (const web of [closed, open, alias]) await web.close();
      client.close();
      await server.stop();
    }
  });
});

describe("Express middleware, keys the service cannot take", () => {
  // Each comes from the request: the caller's fault, answered 400 with what is wrong (never the
  // key itself), before any call, whatever the failure mode: not a 500, not let through.
  const BAD_KEYS: Record<string, { key: string | undefined; answer: string }> = {
    empty: { key: "", answer: "rate limit key missing" },
    absent: { key: undefined, answer: "rate limit key missing" },
    lone: { key: "\uDC00", answer: "rate limit key is not well-formed Unicode (it has a lone surrogate)" },
    // An emoji cut in half by slice: "user-" and the first of its two UTF-16 units.
    cut: { key: "user-\u{1F600}".slice(0, 6), answer: "rate limit key is not well-formed Unicode (it has a lone surrogate)" },
    long: { key: "k".repeat(1025), answer: "rate limit key is longer than 1024 bytes" },
    // 513 characters, 1026 UTF-8 bytes: the bound counts bytes.
    wide: { key: "\u00e9".repeat(513), answer: "rate limit key is longer than 1024 bytes" },
  };
  const FITS = "\u00e9".repeat(512); // exactly 1024 bytes
  let server: RunningServer;
  const sent: string[] = [];
  const recordEveryCall: Interceptor = (options, nextCall) => {
    sent.push(options.method_definition.path);
    return new InterceptingCall(nextCall(options));
  };
  const recording = (target: string) =>
    new RateLimitClient(target, { timeoutMs: 5000, channelOptions: { interceptors: [recordEveryCall] } as ChannelOptions });
  let onServer: RateLimitClient;
  let unreachable: RateLimitClient;

  before(async () => {
    server = await startServer({ limits: LIMITS });
    onServer = recording(server.target);
    unreachable = recording("127.0.0.1:1");
  });
  after(async () => {
    onServer?.close();
    unreachable?.close();
    await server?.stop();
  });

  test("a key empty, absent, over 1024 bytes or with a lone surrogate is answered 400 without a call, in every failure mode", async () => {
    const slots = { inFlight: "slots", inFlightConfig: { kind: "CONCURRENCY", capacity: 5 } } as const;
    // Closed on the real server (a call sent would be refused: 500); open on an unreachable one
    // (a call sent would fail UNAVAILABLE and let the request through: 200).
    const variants: Array<[string, RateLimitClient, Partial<RateLimitMiddlewareOptions<Request, Response>>]> = [
      ["rate limit, closed", onServer, { name: "pages", failureMode: "closed" }],
      ["rate limit, open", unreachable, { name: "pages", failureMode: "open" }],
      ["inFlight, open", unreachable, { ...slots, failureMode: "open" }],
      ["rate limit and inFlight, closed", onServer, { name: "pages", ...slots }],
    ];
    for (const [what, client, variant] of variants) {
      const lines: string[] = [];
      const web = await serve(
        appWith({
          client,
          keyGenerator: (req) => BAD_KEYS[String(req.headers["x-case"])]!.key as string,
          logger: { error: (line: string) => lines.push(line) },
          ...variant,
        } as RateLimitMiddlewareOptions<Request, Response>),
      );
      try {
        for (const [name, { answer }] of Object.entries(BAD_KEYS)) {
          const r = await fetch(web.url, { headers: { "x-case": name } });
          assert.deepEqual([r.status, await r.text()], [400, answer], `${what}, key ${name}`);
        }
      } finally {
        await web.close();
      }
      assert.deepEqual(lines, [], `${what}: the caller's fault is not logged`);
    }
    assert.deepEqual(sent, [], "no call was made");
    // A key of exactly 1024 bytes is limited as usual.
    const web = await serve(appWith({ client: onServer, name: "pages", keyGenerator: () => FITS }));
    try {
      const r = await fetch(web.url);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("ratelimit-limit"), "2");
    } finally {
      await web.close();
    }
    assert.deepEqual(sent, ["/ratelimit.v1.RateLimitService/Consume"]);
  });
});
