// An Express app with the middleware in front of it, served on a free port, for the tests of
// the middleware.
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";

import express, { type Request, type Response } from "express";

import { rateLimit, type RateLimitInfo, type RateLimitMiddlewareOptions } from "@ratelimit/client";

export async function serve(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
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
export function appWith(options: RateLimitMiddlewareOptions<Request, Response>): express.Express {
  const app = express();
  // Express' own error handler answers 500 without printing each error's stack.
  app.set("env", "test");
  app.use(rateLimit(options));
  app.get("/", (req, res) => {
    const info = (req as unknown as { rateLimit?: RateLimitInfo }).rateLimit;
    res.json({ ok: true, remaining: info?.remaining ?? null });
  });
  return app;
}
