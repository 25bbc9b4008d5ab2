// Max in flight for the Express middleware: a request's slot (a lease) taken before the
// handler and given back before the response's end is sent.
import type { RateLimitClient } from "./client.js";
import { RateLimitError } from "./errors.js";
import { LeaseDeniedError, type Lease } from "./lease.js";
import type { AcquireResult, LimitRequest, RateLimitResult } from "./types.js";
import type { ResponseLike } from "./express.js";

/** An acquire's answer in the shape of a Consume's, for the headers and the handler. */
function resultOfAcquire(a: AcquireResult): RateLimitResult {
  const r: RateLimitResult = { allowed: a.allowed, results: a.results, deniedBy: a.deniedBy, failedOpen: false, replayed: a.replayed };
  if (a.retryAt) r.retryAt = a.retryAt;
  if (a.retryAfterMs !== undefined) r.retryAfterMs = a.retryAfterMs;
  if (a.reason) r.reason = a.reason;
  return r;
}

/** Acquires a request's slot (and tokens): the held lease when allowed, the answer either way. */
export async function holdForRequest(
  client: RateLimitClient,
  limits: LimitRequest[],
  timeoutMs: number | undefined,
): Promise<{ result: RateLimitResult; lease?: Lease }> {
  try {
    const lease = await client.lease({ limits }, timeoutMs !== undefined ? { timeoutMs } : undefined);
    return { result: resultOfAcquire(lease.result), lease };
  } catch (e) {
    if (e instanceof LeaseDeniedError) return { result: resultOfAcquire(e.result) };
    throw e;
  }
}

/** The line logged when a request's slot could not be given back, and its kind. */
export function describeReleaseError(inFlight: string, error: unknown): { kind: string; line: string } {
  const what = error instanceof RateLimitError ? `${error.codeName}: ${error.details}` : String(error);
  return {
    kind: `release ${what}`,
    line:
      `ratelimit middleware, inFlight ${JSON.stringify(inFlight)}: a request's slot could not be given back (${what}): ` +
      "it comes back when its lease expires",
  };
}

/** The line logged when a release outlasted the wait of a response's end. */
export function releaseSlowLine(inFlight: string, waitMs: number): string {
  return (
    `ratelimit middleware, inFlight ${JSON.stringify(inFlight)}: a request's slot was not given back within ${waitMs} ms: ` +
    "its response was ended without waiting longer"
  );
}

/** The line logged when the response's end, called once the slot was back, threw. */
export function describeEndError(error: unknown): { kind: string; line: string } {
  const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return { kind: `end ${what}`, line: `ratelimit middleware: the response's end threw once its slot was given back: ${what}` };
}

/**
 * The retry time of a max-in-flight denial (no free slot), in ms: 1 s. The server's is when the
 * holders' leases expire (their whole TTL, 30 s by default), but the middleware releases each
 * slot as its request ends, so one is usually free much sooner.
 */
const IN_FLIGHT_RETRY_AFTER_MS = 1000;

/** The longest a response's end waits for its slot's release without `timeoutMs`, in ms. */
export const RELEASE_WAIT_MS = 1000;

/** The longest delay setTimeout takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Makes the response's end wait for `release` (for at most `waitMs`; `slow` is called when it
 * takes longer): `res.end` (which send, json, a pipe's end and Express' error handler all call)
 * returns the response at once, as it does, and is called with the same arguments once the slot
 * is back. Writes before it are not delayed. `release` never rejects; `failed` gets what the
 * delayed end throws.
 */
export function endAfter(
  res: ResponseLike,
  release: () => Promise<void>,
  waitMs: number,
  slow: () => void,
  failed: (e: unknown) => void,
): void {
  const target = res as unknown as { end: (...args: unknown[]) => unknown };
  const end = target.end;
  let waited: Promise<void> | undefined;
  let done = false;
  target.end = function (this: unknown, ...args: unknown[]): unknown {
    if (done) return end.apply(this, args);
    waited ??= new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        slow();
        resolve();
      }, Math.min(waitMs, MAX_TIMER_MS));
      void release().then(() => {
        clearTimeout(timer);
        resolve();
      });
    }).then(() => {
      done = true;
    });
    void waited.then(() => {
      try {
        end.apply(this, args);
      } catch (e) {
        // The end the application called can no longer throw at it (bad arguments, say): logged,
        // and the response destroyed rather than left open.
        failed(e);
        (res as { destroy?: () => unknown }).destroy?.();
      }
    });
    return this;
  };
}

/**
 * A denial's retry time in ms (undefined when no retry can succeed): the server's, unless the
 * acquire's concurrency limit (max in flight, its first limit) decided it for want of a free
 * slot: then IN_FLIGHT_RETRY_AFTER_MS, or a rate limit's retry time when that one denies too
 * and is later (or none, when that one can never allow).
 */
export function denialRetryMs(result: RateLimitResult, inFlight: boolean): number | undefined {
  if (!inFlight || result.deniedBy !== 0 || result.reason !== "NO_FREE_SLOTS") return result.retryAfterMs;
  let ms = IN_FLIGHT_RETRY_AFTER_MS;
  for (const r of result.results.slice(1)) {
    if (r.allowed) continue;
    if (r.retryAfterMs === undefined) return undefined;
    ms = Math.max(ms, r.retryAfterMs);
  }
  return ms;
}
