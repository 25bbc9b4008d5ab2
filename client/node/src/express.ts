// Express middleware, with the option names of express-rate-limit where they apply.
import type { RateLimitClient } from "./client.js";
import { checkTimeoutMs } from "./convert.js";
import { RateLimitError } from "./errors.js";
import { ThrottledLog, type ErrorLogger } from "./throttled-log.js";
import type { Lease } from "./lease.js";
import {
  RELEASE_WAIT_MS,
  denialRetryMs,
  describeEndError,
  describeReleaseError,
  endAfter,
  holdForRequest,
  releaseSlowLine,
} from "./in-flight.js";
import { isWellFormed } from "./validate.js";
import type { ConcurrencyConfig, LimitConfig, LimitRequest, RateLimitResult } from "./types.js";

/** The longest key the service takes, in UTF-8 bytes (ratelimit.proto: a key is 1..1024 bytes). */
export const MAX_KEY_BYTES = 1024;

/**
 * Why a request's key cannot be sent (undefined when it can): missing (empty, or no key at
 * all), not well-formed Unicode (a lone surrogate, which would reach the service as invalid
 * UTF-8), or longer than MAX_KEY_BYTES. The key comes from the request, so each is the
 * caller's fault: answered 400 without a call, whatever the failure mode. The reason does not
 * echo the key (an API key, say).
 */
function badKey(key: unknown): string | undefined {
  if (key === undefined || key === null || key === "") return "rate limit key missing";
  if (typeof key !== "string") return undefined; // sent as protobufjs writes it, as before
  if (!isWellFormed(key)) return "rate limit key is not well-formed Unicode (it has a lone surrogate)";
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_BYTES) return `rate limit key is longer than ${MAX_KEY_BYTES} bytes`;
  return undefined;
}

/** What the middleware reads of a request (an Express Request fits). */
export interface RequestLike {
  ip?: string | undefined;
  socket?: { remoteAddress?: string | undefined } | undefined;
}

/** What the middleware uses of a response (an Express Response fits). */
export interface ResponseLike {
  setHeader(name: string, value: string | number): unknown;
  status(code: number): unknown;
  send(body?: unknown): unknown;
  headersSent?: boolean;
  /** With `inFlight`: the slot is given back on "close" (an Express Response has it). */
  once?(event: "close", listener: () => void): unknown;
  /**
   * With `inFlight` and `once`: the slot is given back before the response's end is sent, which
   * waits for it (an Express Response has it).
   */
  end?(...args: never[]): unknown;
}

export type NextFunction = (err?: unknown) => void;

/** Set on the request (as `req.rateLimit` by default) once the service has answered. */
export interface RateLimitInfo {
  /** The limit's capacity. */
  limit: number;
  /** Whole tokens left (0 when denied or in debt). */
  remaining: number;
  /** When the limit has room again (denied) or is full again (allowed, when known). */
  resetTime: Date | undefined;
  /** The service's whole answer. */
  result: RateLimitResult;
}

type Awaitable<T> = T | Promise<T>;

/**
 * What the middleware does when the service cannot answer (unreachable, or no answer within the
 * deadline): "closed" refuses the request (`storeErrorHandler`, 503 by default), "open" lets it
 * through unlimited.
 */
export type FailureMode = "open" | "closed";

export interface RateLimitMiddlewareBaseOptions<Req extends RequestLike = RequestLike, Res extends ResponseLike = ResponseLike> {
  /** The client that asks the service. */
  client: RateLimitClient;
  /**
   * The window (period) of the limit, in ms, with `limit`: the middleware then sends an inline
   * config of `limit` requests per `windowMs` (see `algorithm`). Omit both to use a limit of
   * the server's limits file named `name`.
   */
  windowMs?: number;
  /** Requests allowed per `windowMs` (the capacity). */
  limit?: number;
  /**
   * With windowMs/limit: "fixed-window" (default; windows aligned to the epoch, like
   * express-rate-limit's) or "token-bucket" (continuous refill, up to `limit`).
   */
  algorithm?: "fixed-window" | "token-bucket";
  /** Any other inline config (instead of windowMs/limit). */
  config?: LimitConfig;
  /**
   * The key of the caller. Default: `req.ip` (else the socket's address). A request whose key is
   * empty (or undefined), longer than 1024 UTF-8 bytes, or not well-formed Unicode (a lone
   * surrogate, as cutting a string inside an emoji leaves) is answered 400 without asking the
   * service, whatever `failureMode`: make the key fall back to another to limit such requests,
   * or `skip` them.
   */
  keyGenerator?: (req: Req, res: Res) => Awaitable<string>;
  /** Tokens a request takes. Default 1. */
  count?: number | ((req: Req, res: Res) => Awaitable<number>);
  /** Requests for which it returns true are not counted. */
  skip?: (req: Req, res: Res) => Awaitable<boolean>;
  /** Answers a denied request. Default: `statusCode` with `message`. */
  handler?: (req: Req, res: Res, next: NextFunction, options: ResolvedOptions) => unknown;
  /** Status of a denial. Default 429. */
  statusCode?: number;
  /** Body of a denial. Default "Too many requests, please try again later.". */
  message?: unknown | ((req: Req, res: Res) => Awaitable<unknown>);
  /**
   * The IETF RateLimit headers: "draft-6" (true; default: RateLimit-Limit, RateLimit-Remaining,
   * RateLimit-Reset, RateLimit-Policy when the window is known), "draft-7" (one `RateLimit`
   * header plus RateLimit-Policy), or false.
   */
  standardHeaders?: boolean | "draft-6" | "draft-7";
  /** Also X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (epoch s). Default false. */
  legacyHeaders?: boolean;
  /**
   * When the service cannot answer (UNAVAILABLE: unreachable; DEADLINE_EXCEEDED: no answer in
   * time): "closed" (default) answers through `storeErrorHandler`, "open" lets the request
   * through. Any other error (a misspelt name, a bad config, a refused call) is a configuration
   * error whatever the mode: logged, and passed to `next(error)` (HTTP 500). A key the service
   * cannot take is answered 400 before any call (see `keyGenerator`).
   */
  failureMode?: FailureMode;
  /**
   * @deprecated Use `failureMode`: `true` is "open", `false` is "closed". Giving both with
   * different meanings throws.
   */
  passOnStoreError?: boolean;
  /**
   * The fail-closed answer, when the service cannot answer. Default: 503 "Rate limit service
   * unavailable" with Retry-After: 1.
   */
  storeErrorHandler?: (error: RateLimitError, req: Req, res: Res, next: NextFunction) => unknown;
  /**
   * Where configuration errors are logged: one line per distinct status and message, at most one
   * per 10 s, with the count of those left out. Default `console`.
   */
  logger?: ErrorLogger;
  /** Where the RateLimitInfo goes on the request. Default "rateLimit". */
  requestPropertyName?: string;
  /**
   * Deadline of the service call, in ms. Default: the client's. With `inFlight`, also the longest
   * a response's end waits for its slot's release (default 1 s).
   */
  timeoutMs?: number;
}

/**
 * The middleware's options: a rate limit (`name`), a concurrency limit (`inFlight`), or both.
 */
export type RateLimitMiddlewareOptions<Req extends RequestLike = RequestLike, Res extends ResponseLike = ResponseLike> =
  RateLimitMiddlewareBaseOptions<Req, Res> & (RateLimitOption | InFlightOption);

/** The rate limit of the middleware. */
export interface RateLimitOption {
  /**
   * The limit's name: required unless `inFlight` is given. The service keeps one counter per name and key, so every
   * middleware (route, service) that gives the same name shares its counters: give each its own
   * (e.g. "search-api:/search"), and the same one only where one limit is meant to cover both.
   * With windowMs/limit or config it names an inline limit; without, a limit of the server's
   * limits file.
   */
  name: string;
  inFlight?: string;
  inFlightConfig?: ConcurrencyConfig;
}

/** The concurrency limit of the middleware (max in flight), with or without a rate limit. */
export interface InFlightOption {
  /**
   * Max in flight: the name of a concurrency limit. Each request holds one slot of it, of the
   * key `keyGenerator` gives, from before `next()` until the response ends (an error answered by
   * Express's error handler too), or closes without ending (the connection ended), extended in
   * the background meanwhile. The slot is given back before the response's end is sent: the end
   * (not the writes before it) waits for the release, at most `timeoutMs` (1 s when not given),
   * so a client that waits for each response is never refused for want of a slot. A request
   * finding no free slot is denied as a rate limit denies (`statusCode` 429 with Retry-After and
   * the RateLimit headers of the concurrency limit), but with Retry-After (and RateLimit-Reset)
   * 1 s rather than the server's retry time, which is when the holders' leases would expire: each
   * slot comes back as its request ends (a rate limit of the same acquire that also denies keeps
   * its own time when later). The failure mode is the same. With `name` too, the request's tokens
   * and its slot are taken in one acquire, all or nothing.
   */
  inFlight: string;
  /** Defines `inFlight` inline: `{ kind: "CONCURRENCY", capacity: 10 }`. */
  inFlightConfig?: ConcurrencyConfig;
  name?: string;
}

/** The options the handler receives, with the defaults applied. */
export interface ResolvedOptions {
  /** The rate limit's name, else the concurrency limit's (inFlight). */
  name: string;
  config: LimitConfig | undefined;
  statusCode: number;
  message: unknown;
  standardHeaders: false | "draft-6" | "draft-7";
  legacyHeaders: boolean;
  failureMode: FailureMode;
  requestPropertyName: string;
}

const DEFAULT_MESSAGE = "Too many requests, please try again later.";

function resolveConfig(o: RateLimitMiddlewareOptions<never, never>): LimitConfig | undefined {
  if (o.config) return o.config;
  if (o.windowMs === undefined && o.limit === undefined) return undefined;
  if (o.windowMs === undefined || o.limit === undefined) {
    throw new TypeError("rateLimit: windowMs and limit go together");
  }
  if (o.algorithm === "token-bucket") {
    return { kind: "TOKEN_BUCKET", rate: o.limit, periodMs: o.windowMs, capacity: o.limit };
  }
  return { kind: "FIXED_WINDOW", rate: o.limit, periodMs: o.windowMs, capacity: o.limit, startMs: 0 };
}

function resolveFailureMode(o: RateLimitMiddlewareOptions<never, never>): FailureMode {
  const mode: unknown = o.failureMode;
  if (mode !== undefined && mode !== "open" && mode !== "closed") {
    throw new TypeError(`rateLimit: failureMode must be "open" or "closed", not ${JSON.stringify(mode)}`);
  }
  const pass: unknown = o.passOnStoreError;
  if (pass === undefined) return mode ?? "closed";
  if (typeof pass !== "boolean") {
    throw new TypeError(`rateLimit: passOnStoreError (deprecated: use failureMode) must be a boolean, not ${JSON.stringify(pass)}`);
  }
  const alias: FailureMode = pass ? "open" : "closed";
  if (mode !== undefined && mode !== alias) {
    throw new TypeError(`rateLimit: failureMode "${mode}" contradicts passOnStoreError: ${pass} (deprecated); give failureMode only`);
  }
  return alias;
}

/** The line logged for an error that is not an outage, and its kind (what makes it distinct). */
function describeError(name: string, error: unknown): { kind: string; line: string } {
  const what =
    error instanceof RateLimitError
      ? `${error.codeName}: ${error.details}`
      : error instanceof Error
        ? `${error.name}: ${error.message}`
        : String(error);
  return {
    kind: what,
    line: `ratelimit middleware, limit ${JSON.stringify(name)}: ${what} (a configuration error, not an outage: passed to next(error))`,
  };
}

/**
 * Seconds until the limit has room again: for a denial, its retry time (`retryAfterMs`); for an
 * allowance, when the limit is full again, if the config is known (undefined otherwise).
 */
function resetSeconds(
  result: RateLimitResult,
  retryAfterMs: number | undefined,
  config: LimitConfig | undefined,
  now: number,
): number | undefined {
  if (!result.allowed) {
    return retryAfterMs === undefined ? undefined : Math.max(0, Math.ceil(retryAfterMs / 1000));
  }
  const r = result.results[0];
  if (!config || !r) return undefined;
  if (config.kind === "FIXED_WINDOW" && config.startMs !== undefined) {
    const into = (((now - config.startMs) % config.periodMs) + config.periodMs) % config.periodMs;
    return Math.ceil((config.periodMs - into) / 1000);
  }
  if (config.kind === "TOKEN_BUCKET") {
    const missing = Math.max(0, (config.capacity ?? config.rate) - r.value);
    return Math.ceil((missing * config.periodMs) / config.rate / 1000);
  }
  return undefined;
}

function setHeaders(
  res: ResponseLike,
  o: ResolvedOptions,
  info: RateLimitInfo,
  reset: number | undefined,
): void {
  const policy = o.config ? `${info.limit};w=${Math.max(1, Math.round(o.config.periodMs / 1000))}` : undefined;
  if (o.standardHeaders === "draft-6") {
    res.setHeader("RateLimit-Limit", String(info.limit));
    res.setHeader("RateLimit-Remaining", String(info.remaining));
    if (reset !== undefined) res.setHeader("RateLimit-Reset", String(reset));
    if (policy) res.setHeader("RateLimit-Policy", policy);
  } else if (o.standardHeaders === "draft-7") {
    const parts = [`limit=${info.limit}`, `remaining=${info.remaining}`];
    if (reset !== undefined) parts.push(`reset=${reset}`);
    res.setHeader("RateLimit", parts.join(", "));
    if (policy) res.setHeader("RateLimit-Policy", policy);
  }
  if (o.legacyHeaders) {
    res.setHeader("X-RateLimit-Limit", String(info.limit));
    res.setHeader("X-RateLimit-Remaining", String(info.remaining));
    if (info.resetTime) res.setHeader("X-RateLimit-Reset", String(Math.ceil(info.resetTime.getTime() / 1000)));
  }
}

/**
 * Express middleware: takes `count` tokens from the caller's key for each request; a denied
 * request is answered `statusCode` (429) with `Retry-After` and the RateLimit headers. A request
 * whose key is missing, over 1024 bytes or not well-formed Unicode is answered 400, unasked.
 *
 *   app.use(rateLimit({ client, windowMs: 60_000, limit: 100 }));
 */
export function rateLimit<Req extends RequestLike = RequestLike, Res extends ResponseLike = ResponseLike>(
  options: RateLimitMiddlewareOptions<Req, Res>,
): (req: Req, res: Res, next: NextFunction) => Promise<void> {
  const inFlight: unknown = options.inFlight;
  if (inFlight !== undefined && (typeof inFlight !== "string" || inFlight === "")) {
    throw new TypeError(`rateLimit: "inFlight" must be the name of a concurrency limit, not ${JSON.stringify(inFlight)}`);
  }
  if (options.timeoutMs !== undefined) checkTimeoutMs(options.timeoutMs, "rateLimit: timeoutMs");
  const rateName: unknown = options.name;
  const name: unknown = rateName === undefined && inFlight !== undefined ? inFlight : rateName;
  if (typeof name !== "string" || name === "") {
    throw new TypeError(
      'rateLimit: the "name" option is required: the limit\'s name. The service keeps one counter per ' +
        "name and key, so middlewares (routes, services) given the same name share counters: give each its own.",
    );
  }
  const config = resolveConfig(options as RateLimitMiddlewareOptions<never, never>);
  const standard = options.standardHeaders ?? "draft-6";
  const resolved: ResolvedOptions = {
    name,
    config,
    statusCode: options.statusCode ?? 429,
    message: options.message ?? DEFAULT_MESSAGE,
    standardHeaders: standard === true ? "draft-6" : standard,
    legacyHeaders: options.legacyHeaders ?? false,
    failureMode: resolveFailureMode(options as RateLimitMiddlewareOptions<never, never>),
    requestPropertyName: options.requestPropertyName ?? "rateLimit",
  };
  const keyGenerator =
    options.keyGenerator ?? ((req: Req) => req.ip ?? req.socket?.remoteAddress ?? "unknown");
  const handler =
    options.handler ??
    (async (req: Req, res: Res) => {
      const m = options.message;
      const body = typeof m === "function" ? await (m as (q: Req, s: Res) => Awaitable<unknown>)(req, res) : resolved.message;
      res.status(resolved.statusCode);
      res.send(body);
    });
  const storeErrorHandler =
    options.storeErrorHandler ??
    ((_error: RateLimitError, _req: Req, res: Res) => {
      res.setHeader("Retry-After", "1");
      res.status(503);
      res.send("Rate limit service unavailable");
    });
  const errorLog = new ThrottledLog(options.logger ?? console);
  // For what is logged in the background (a release, a delayed end): a logger that throws loses
  // the line, and neither holds the response's end back nor becomes an unhandled rejection.
  const logQuietly = ({ kind, line }: { kind: string; line: string }): void => {
    try {
      errorLog.report(kind, line);
    } catch {
      // nowhere left to report it
    }
  };

  return async (req: Req, res: Res, next: NextFunction): Promise<void> => {
    // With inFlight, whether the response closed (the client may leave while the key is made or
    // the slot acquired: the "close" event is then over before the lease exists), and what gives
    // the slot back: the response's end, or "close" when it never ends, whichever comes first.
    let closed = false;
    let giveBack: (() => Promise<void>) | undefined;
    if (inFlight !== undefined && res.once) {
      res.once("close", () => {
        closed = true;
        void giveBack?.();
      });
    }
    let key: string;
    let count: number | undefined;
    try {
      if (options.skip && (await options.skip(req, res))) {
        next();
        return;
      }
      key = await keyGenerator(req, res);
      count = typeof options.count === "function" ? await options.count(req, res) : options.count;
    } catch (e) {
      // The application's own callbacks failed: its error, not the service's.
      next(e);
      return;
    }
    const bad = badKey(key);
    if (bad !== undefined) {
      // The caller's fault, not the service's nor the configuration's: not logged, never let
      // through by failureMode "open".
      res.status(400);
      res.send(bad);
      return;
    }
    let result: RateLimitResult;
    let lease: Lease | undefined;
    try {
      const rate: LimitRequest = { name, key, ...(count !== undefined ? { count } : {}), ...(config ? { config } : {}) };
      if (inFlight !== undefined) {
        const slot: LimitRequest = { name: inFlight, key, count: 1, ...(options.inFlightConfig ? { config: options.inFlightConfig } : {}) };
        const held = await holdForRequest(
          options.client,
          rateName === undefined ? [slot] : [slot, rate],
          options.timeoutMs,
        );
        result = held.result;
        lease = held.lease;
      } else {
        result = await options.client.consume(
          rate,
          options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : undefined,
        );
      }
    } catch (error) {
      if (!(error instanceof RateLimitError && error.unavailable)) {
        // Not an outage: a misspelt name, a bad key or config, a refused call. Letting requests
        // through (or answering 503) would hide it; it is the application's error.
        const { kind, line } = describeError(name, error);
        errorLog.report(kind, line);
        next(error);
        return;
      }
      if (resolved.failureMode === "open") {
        next();
        return;
      }
      try {
        await storeErrorHandler(error, req, res, next);
      } catch (e) {
        next(e);
      }
      return;
    }
    if (lease) {
      const held = lease;
      const slots = String(inFlight);
      let released: Promise<void> | undefined;
      // One Release, whichever asks first; a failed one is logged, and the lease then expires.
      giveBack = () =>
        (released ??= held.release().then(
          () => undefined,
          (error: unknown) => logQuietly(describeReleaseError(slots, error)),
        ));
      // Without "close" there is no way to know when the response ends: given back at once.
      if (closed || !res.once) void giveBack();
      if (closed) return; // nobody is left to answer
      if (res.once && typeof res.end === "function") {
        const waitMs = options.timeoutMs ?? RELEASE_WAIT_MS;
        endAfter(
          res,
          giveBack,
          waitMs,
          () => logQuietly({ kind: "release slow", line: releaseSlowLine(slots, waitMs) }),
          (error) => logQuietly(describeEndError(error)),
        );
      }
    }
    try {
      if (result.failedOpen || result.results.length === 0) {
        next();
        return;
      }
      const decisive = result.results[result.allowed ? 0 : Math.max(0, result.deniedBy)]!;
      const now = Date.now();
      // A denial's retry time: Retry-After, RateLimit-Reset and resetTime (X-RateLimit-Reset) follow it.
      const retryAfterMs = result.allowed ? undefined : denialRetryMs(result, inFlight !== undefined);
      const reset = resetSeconds(result, retryAfterMs, lease || inFlight !== undefined ? undefined : config, now);
      let resetTime: Date | undefined;
      if (result.allowed) {
        resetTime = reset !== undefined ? new Date(now + reset * 1000) : undefined;
      } else if (retryAfterMs !== undefined) {
        // The server's own retry time keeps its retryAt.
        resetTime = retryAfterMs === result.retryAfterMs ? result.retryAt : new Date(now + retryAfterMs);
      }
      const info: RateLimitInfo = {
        limit: decisive.capacity,
        remaining: result.allowed ? Math.max(0, Math.floor(decisive.value + 1e-9)) : 0,
        resetTime,
        result,
      };
      (req as unknown as Record<string, unknown>)[resolved.requestPropertyName] = info;
      setHeaders(res, inFlight !== undefined ? { ...resolved, config: undefined } : resolved, info, reset);
      if (result.allowed) {
        next();
        return;
      }
      if (reset !== undefined) res.setHeader("Retry-After", String(reset));
      await handler(req, res, next, resolved);
    } catch (e) {
      next(e);
    }
  };
}
