// Max in flight in the Express middleware: a request's slot is given back before its response's
// end is sent, once, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import express, { type Request, type Response } from "express";
import { InterceptingCall, type ChannelOptions, type Interceptor } from "@grpc/grpc-js";

import { RateLimitClient, rateLimit } from "@ratelimit/client";

import { eventually, startServer, type RunningServer } from "./support.js";
import { appWith, serve } from "./express-app.js";

describe("Express middleware, max in flight: the slot comes back before the response's end", () => {
  const ONE_SLOT = { kind: "CONCURRENCY", capacity: 1 } as const;
  let server: RunningServer;
  let client: RateLimitClient;
  let n = 0;

  before(async () => {
    server = await startServer();
    client = new RateLimitClient(server.target, { timeoutMs: 10_000 });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  /**
   * A client whose Release calls reach the server `held` ms after they are made, or once `held`
   * resolves (a slow network; or a release that loses the race to the next request's acquire, as
   * when the caller's next request goes to another instance of the app), counted as they are made
   * and as they are answered.
   */
  function slowReleases(held: number | Promise<void>): { client: RateLimitClient; releases: { sent: number; answered: number } } {
    const releases = { sent: 0, answered: 0 };
    const holdBackRelease: Interceptor = (options, nextCall) => {
      if (!options.method_definition.path.endsWith("/Release")) return new InterceptingCall(nextCall(options));
      releases.sent++;
      return new InterceptingCall(nextCall(options), {
        start(metadata, _listener, next) {
          const send = () =>
            next(metadata, {
              onReceiveStatus(status, nextStatus) {
                releases.answered++;
                nextStatus(status);
              },
            });
          if (typeof held === "number") setTimeout(send, held);
          else void held.then(send);
        },
      });
    };
    const slow = new RateLimitClient(server.target, {
      timeoutMs: 10_000,
      channelOptions: { interceptors: [holdBackRelease] } as ChannelOptions,
    });
    return { client: slow, releases };
  }

  test("a client that waits for each response is never refused by one slot", async () => {
    const user = `u${++n}`;
    // Each release 10 ms on its way: given back only once the response was sent, it would reach
    // the server after the next request's acquire.
    const { client: slow, releases } = slowReleases(10);
    const web = await serve(appWith({ client: slow, inFlight: "sequential", inFlightConfig: ONE_SLOT, keyGenerator: () => user }));
    try {
      const statuses: number[] = [];
      // One request at a time on a kept-alive connection, the next sent as soon as the last is read.
      for (let i = 0; i < 40; i++) {
        const r = await fetch(web.url);
        await r.arrayBuffer();
        statuses.push(r.status);
      }
      const refused = statuses.filter((s) => s !== 200).length;
      assert.equal(refused, 0, `${refused} of 40 refused: ${statuses.join(" ")}`);
      assert.equal(releases.answered, 40);
    } finally {
      await web.close();
      slow.close();
    }
  });

  test("a streamed response gets its first chunk at once and holds the slot until its end", async () => {
    const user = `u${++n}`;
    const { client: slow, releases } = slowReleases(20);
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    const app = appWith({ client: slow, inFlight: "streamed", inFlightConfig: ONE_SLOT, keyGenerator: () => user });
    app.get("/stream", async (_req, res) => {
      res.write("first,");
      await finished;
      res.end("last");
    });
    const web = await serve(app);
    try {
      const streamed = await fetch(web.url + "/stream");
      assert.equal(streamed.status, 200);
      const reader = streamed.body!.getReader();
      const decoder = new TextDecoder();
      const first = await reader.read();
      assert.equal(decoder.decode(first.value), "first,", "the first chunk, before the end");
      const during = await fetch(web.url);
      assert.equal(during.status, 429, "the slot is held while the response streams");
      assert.equal(releases.sent, 0);
      finish();
      let rest = "";
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += decoder.decode(chunk.value);
      assert.equal(rest, "last");
      assert.equal(releases.answered, 1, "the end was sent once the release was answered");
      const next = await fetch(web.url);
      assert.equal(next.status, 200, "the slot is free as soon as the stream has ended");
    } finally {
      finish();
      await web.close();
      slow.close();
    }
  });

  test("one release per request, whether the response ends before it closes or closes before it ends", async () => {
    const user = `u${++n}`;
    const { client: slow, releases } = slowReleases(20);
    let closes = 0;
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    let ended!: () => void;
    const lateEnd = new Promise<void>((r) => (ended = r));
    const app = express();
    app.use(rateLimit<Request, Response>({ client: slow, inFlight: "once", inFlightConfig: ONE_SLOT, keyGenerator: () => user }));
    app.get("/", (_req, res) => {
      res.once("close", () => closes++);
      res.send("ok");
    });
    app.get("/abandoned", (_req, res) => {
      // Ends only after the client has gone away (the response closed first).
      res.once("close", () => {
        res.end("too late");
        ended();
      });
      entered();
    });
    const web = await serve(app);
    try {
      for (let i = 1; i <= 5; i++) {
        const r = await fetch(web.url);
        assert.equal(await r.text(), "ok");
        assert.equal(releases.answered, i, `request ${i}: its release was answered before its end arrived`);
      }
      await eventually(() => closes === 5, 5000, "every response closed");

      const abort = new AbortController();
      const abandoned = fetch(web.url + "/abandoned", { signal: abort.signal }).catch(() => "aborted");
      await inHandler;
      abort.abort();
      assert.equal(await abandoned, "aborted");
      await lateEnd;
      await eventually(async () => (await fetch(web.url)).status === 200, 5000, "the abandoned request's slot back");
      await eventually(() => closes === 6, 5000, "the last response closed");
      assert.equal(releases.sent, 7, "five responses, the abandoned one, the last one: one release each");
      assert.equal(releases.answered, 7);
    } finally {
      await web.close();
      slow.close();
    }
  });

  test("a release slower than timeoutMs holds the response's end back that long at most, and is logged", async () => {
    const user = `u${++n}`;
    let letGo!: () => void;
    const { client: slow, releases } = slowReleases(new Promise<void>((r) => (letGo = r)));
    const lines: string[] = [];
    const web = await serve(
      appWith({
        client: slow,
        inFlight: "unreleased",
        inFlightConfig: ONE_SLOT,
        keyGenerator: () => user,
        timeoutMs: 250,
        logger: { error: (line: string) => lines.push(line) },
      }),
    );
    try {
      const r = await fetch(web.url);
      assert.deepEqual(await r.json(), { ok: true, remaining: 0 });
      assert.deepEqual([releases.sent, releases.answered], [1, 0], "ended while its release is still under way");
      assert.deepEqual(lines, [
        'ratelimit middleware, inFlight "unreleased": a request\'s slot was not given back within 250 ms: ' +
          "its response was ended without waiting longer",
      ]);
      letGo();
      await eventually(() => releases.answered === 1, 5000, "the release answered");
      assert.equal((await fetch(web.url)).status, 200, "the slot came back all the same");
      assert.equal(lines.length, 1, "nothing failed");
    } finally {
      letGo();
      await web.close();
      slow.close();
    }
  });
});
