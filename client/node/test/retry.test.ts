// An in-process gRPC server in place of ratelimit-server: it answers UNAVAILABLE a set number of
// times and counts the attempts each method receives (only Check is retried), and it can answer
// what a real server only answers when its store fails (failed_open).
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, beforeEach, describe, test } from "node:test";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { RateLimitClient, RateLimitError, rateLimit, status } from "@ratelimit/client";

const protoDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "proto");

describe("retries", () => {
  let server: grpc.Server;
  let target: string;
  const attempts: Record<string, number> = {};
  let failures = 0;
  let reply: Record<string, unknown> = {};

  before(async () => {
    const def = protoLoader.loadSync("ratelimit/v1/ratelimit.proto", { includeDirs: [protoDir], keepCase: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      ratelimit: { v1: { RateLimitService: { service: grpc.ServiceDefinition } } };
    };
    const answer = (method: string) => (_call: unknown, callback: grpc.sendUnaryData<unknown>) => {
      attempts[method] = (attempts[method] ?? 0) + 1;
      if (attempts[method]! <= failures) {
        callback({ code: status.UNAVAILABLE, details: "try later" } as grpc.ServiceError);
        return;
      }
      callback(null, {
        allowed: true,
        results: [{ name: "api", key: "k", allowed: true, value: 7, capacity: 10 }],
        denied_by: -1,
        ...reply,
      });
    };
    server = new grpc.Server();
    server.addService(pkg.ratelimit.v1.RateLimitService.service, {
      Consume: answer("Consume"),
      Check: answer("Check"),
      Reserve: answer("Reserve"),
      Reset: answer("Reset"),
      Settle: answer("Settle"),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
    target = `127.0.0.1:${port}`;
  });
  after(async () => {
    await new Promise<void>((r) => server.tryShutdown(() => r()));
  });
  beforeEach(() => {
    reply = {};
    for (const k of Object.keys(attempts)) delete attempts[k];
  });

  test("check is retried while the service is UNAVAILABLE", async () => {
    failures = 2;
    const client = new RateLimitClient(target, { retryBackoffMs: 1 });
    try {
      const r = await client.check({ name: "api", key: "k" });
      assert.equal(r.allowed, true);
      assert.equal(r.results[0]!.value, 7);
      assert.equal(attempts.Check, 3);
    } finally {
      client.close();
    }
  });

  test("check gives up after checkRetries", async () => {
    failures = 10;
    const client = new RateLimitClient(target, { retryBackoffMs: 1, checkRetries: 3 });
    try {
      await assert.rejects(client.check({ name: "api", key: "k" }), (e: unknown) => e instanceof RateLimitError && e.code === status.UNAVAILABLE);
      assert.equal(attempts.Check, 4);
    } finally {
      client.close();
    }
  });

  test("consume, reserve, settle and reset are never retried", async () => {
    failures = 1;
    const client = new RateLimitClient(target, { retryBackoffMs: 1, adminToken: "t" });
    try {
      const unavailable = (e: unknown) => e instanceof RateLimitError && e.code === status.UNAVAILABLE;
      await assert.rejects(client.consume({ name: "api", key: "k" }), unavailable);
      await assert.rejects(client.reserve({ name: "api", key: "k" }), unavailable);
      await assert.rejects(client.settle([{ receipt: new Uint8Array([1]), used: 0 }]), unavailable);
      await assert.rejects(client.reset({ name: "api", key: "k" }), unavailable);
      assert.deepEqual(attempts, { Consume: 1, Reserve: 1, Settle: 1, Reset: 1 });
    } finally {
      client.close();
    }
  });

  test("failed_open and replayed reach the result; the middleware lets a failed-open request pass", async () => {
    failures = 0;
    reply = { failed_open: true, replayed: true, results: [] };
    const client = new RateLimitClient(target);
    try {
      const r = await client.consume({ name: "api", key: "k" });
      assert.equal(r.failedOpen, true);
      assert.equal(r.replayed, true);
      const headers: Record<string, unknown> = {};
      let passed = false;
      await rateLimit({ client, name: "api", keyGenerator: () => "k" })(
        {},
        { setHeader: (n: string, v: unknown) => (headers[n] = v), status: () => undefined, send: () => undefined },
        (err?: unknown) => {
          assert.equal(err, undefined);
          passed = true;
        },
      );
      assert.equal(passed, true);
      assert.deepEqual(headers, {});
    } finally {
      client.close();
    }
  });
});
