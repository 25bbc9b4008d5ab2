// A held lease on slots of a concurrency limit: `await using lease = await client.lease(...)`
// or `client.withLease(request, async (lease) => ...)`.
import type { CallOptions, RateLimitClient } from "./client.js";
import type { AcquireRequest, AcquireResult, ConcurrencyConfig, LeaseInfo, LeaseRef, ReleaseResult } from "./types.js";
import { RateLimitError } from "./errors.js";
import { checkPeriodMs } from "./validate.js";

// Node before 18.18 / 20.4 has no Symbol.asyncDispose: the well-known symbol TypeScript's
// `await using` looks up is then the registered one, which is what later versions define too.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("Symbol.asyncDispose");

/** The default heartbeat period, as a fraction of the lease's TTL. */
export const HEARTBEAT_FRACTION = 1 / 3;

/**
 * The shortest wait for an extend brought forward before the lease's expiry, in ms; with less
 * time left, the heartbeat waits for the expiry, when the lease is lost.
 */
const MIN_EARLY_EXTEND_MS = 10;

/** The longest delay setTimeout takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What `client.lease` and `client.withLease` take: an acquire, and how to hold the lease. */
export interface LeaseRequest extends AcquireRequest {
  /**
   * How often the lease is extended, in ms: default a third of its TTL (so two extends in a row
   * may fail before it expires); 0: never. Negative or not finite: a TypeError, before any call.
   */
  heartbeatMs?: number;
  /**
   * How long to keep trying while denied, in ms (default 0: a denial rejects at once with a
   * LeaseDeniedError). Between tries it waits the denial's retryAfterMs, but at most a backoff
   * of 50 ms doubling up to 1 s (a release frees a slot sooner than an expiry). Negative or not
   * finite: a TypeError, before any call.
   */
  waitMs?: number;
}

/** `client.lease` found no free slot (or a rate limit of the same acquire denied). */
export class LeaseDeniedError extends Error {
  /** The acquire's answer: retryAfterMs, reason, results. */
  readonly result: AcquireResult;
  /** When a retry can succeed, in ms; undefined when none can (a count over the capacity). */
  readonly retryAfterMs: number | undefined;

  constructor(result: AcquireResult) {
    const when = result.retryAfterMs === undefined ? "no retry can succeed" : `retry after ${Math.ceil(result.retryAfterMs)} ms`;
    super(`acquire denied (${result.reason ?? "denied"}): ${when}`);
    this.name = "LeaseDeniedError";
    this.result = result;
    this.retryAfterMs = result.retryAfterMs;
  }
}

/**
 * The reason of a lost lease's signal: an extend answered NOT_HELD, every extend failed until its
 * expiry, or it expired before an extend could be sent.
 */
export class LeaseLostError extends Error {
  constructor(message: string) {
    super(`lease lost: ${message}`);
    this.name = "LeaseLostError";
  }
}

/**
 * A held lease. A timer extends it every `heartbeatMs` (default a third of its TTL), each time by
 * the same TTL, until `release()` (or the end of an `await using` block, or of withLease's
 * function); a lease answered to a retried requestId (`result.replayed`) is extended at once,
 * being an earlier acquire's with only part of its TTL left. The timer keeps the process running
 * while the lease is held (not once it is released or lost). The next extend never comes after
 * the lease's expiry (counted from the sending of the last call that set it): when the period
 * would bring it there (a heartbeat not shorter than the TTL, an acquire or extend answered late),
 * it comes after half the time left. An extend's deadline is the client's timeout but no later
 * than that expiry, so a hung call cannot keep a lost lease looking held. The lease is lost when
 * an extend answers NOT_HELD (it expired, was reset, or was released elsewhere), when extends have
 * failed and the next one would come after its expiry, or when it expires before an extend could
 * be sent: `signal` then aborts with a LeaseLostError, and `lost` is true. Pass `signal` to the
 * work the slots are for. Without a heartbeat (`heartbeatMs: 0`) nothing extends the lease: it is
 * lost at its expiry, by a timer that does not keep the process running.
 */
export class Lease implements AsyncDisposable {
  /** The acquire's answer (per-limit results, replayed). */
  readonly result: AcquireResult;
  /** Aborted, with a LeaseLostError as its reason, when the lease is lost. */
  readonly signal: AbortSignal;
  /** How many extends the heartbeat made. */
  extensions = 0;
  private current: LeaseInfo;
  private readonly controller = new AbortController();
  private readonly ref: LeaseRef;
  private readonly lifeMs: number;
  private readonly everyMs: number;
  private readonly ttlMs: number | undefined;
  private readonly timeoutMs: number;
  private validUntil: number;
  private timer: NodeJS.Timeout | undefined;
  /** The timer ends at the lease's expiry, too late for an extend. */
  private expiring = false;
  private inFlight: AbortController | undefined;
  private beating: Promise<void> = Promise.resolve();
  private released: Promise<ReleaseResult> | undefined;

  /**
   * @internal Made by RateLimitClient.lease: `sentAt` is when the acquire was sent
   * (performance.now()), `timeoutMs` the client's deadline of each call.
   */
  constructor(
    private readonly client: RateLimitClient,
    request: LeaseRequest,
    result: AcquireResult,
    sentAt: number,
    timeoutMs: number,
  ) {
    this.result = result;
    this.current = result.lease!;
    this.signal = this.controller.signal;
    const info = this.current;
    const limit = request.limits.find((l) => l.name === info.name && l.key === info.key && l.config?.kind === "CONCURRENCY");
    this.ref = { name: info.name, key: info.key, leaseId: info.id };
    if (limit?.config) this.ref.config = limit.config as ConcurrencyConfig;
    this.lifeMs = request.ttlMs ?? info.expiresAt.getTime() - info.acquiredAt.getTime();
    this.everyMs = request.heartbeatMs ?? this.lifeMs * HEARTBEAT_FRACTION;
    this.validUntil = sentAt + this.lifeMs;
    this.ttlMs = request.ttlMs;
    this.timeoutMs = timeoutMs;
    let first = this.everyMs;
    if (result.replayed) {
      // An earlier acquire's lease: only part of its life is left, which this machine can only
      // estimate from the server's expiresAt. Extended at once.
      this.validUntil = Math.min(this.validUntil, performance.now() + (info.expiresAt.getTime() - Date.now()));
      first = 0;
    }
    if (this.everyMs > 0 && this.lifeMs > 0) this.schedule(first);
    else this.watchExpiry();
  }

  /** The lease as the server last described it (expiresAt moves with each extend). */
  get info(): LeaseInfo {
    return this.current;
  }

  get id(): string {
    return this.current.id;
  }

  /** True once the lease is lost. */
  get lost(): boolean {
    return this.signal.aborted;
  }

  /** Throws the LeaseLostError when the lease is lost. */
  throwIfLost(): void {
    this.signal.throwIfAborted();
  }

  /**
   * The next extend after `waitMs`, unless that would reach the lease's expiry; then after half
   * the time left (or, with too little left, at the expiry).
   */
  private schedule(waitMs: number): void {
    const left = this.validUntil - performance.now();
    this.expiring = false;
    let ms = waitMs;
    if (waitMs >= left) {
      ms = left / 2;
      if (ms < MIN_EARLY_EXTEND_MS) {
        this.expiring = true;
        ms = Math.max(0, left);
      }
    }
    ms = Math.min(ms, MAX_TIMER_MS);
    this.timer = setTimeout(() => {
      this.beating = this.beat();
    }, ms);
  }

  /**
   * Without a heartbeat (heartbeatMs 0): the lease is lost at its expiry. The timer keeps no
   * process running (nothing will extend the lease), and release() clears it.
   */
  private watchExpiry(): void {
    const left = this.validUntil - performance.now();
    if (left <= 0) {
      this.controller.abort(new LeaseLostError("it expired before an extend could be sent (no heartbeat: heartbeatMs 0)"));
      return;
    }
    // A timer may fire a fraction of a ms early, or (past MAX_TIMER_MS) long before: looked at again.
    this.timer = setTimeout(() => this.watchExpiry(), Math.min(Math.ceil(left), MAX_TIMER_MS));
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    const sent = performance.now();
    const left = this.validUntil - sent;
    if (this.expiring || left <= 0) {
      this.controller.abort(new LeaseLostError("it expired before an extend could be sent"));
      return;
    }
    this.inFlight = new AbortController();
    let state: string | undefined;
    let error: unknown;
    try {
      const ttl = this.ttlMs;
      // Never past the expiry: a hung call must not keep a lost lease looking held.
      const options = { signal: this.inFlight.signal, timeoutMs: Math.min(this.timeoutMs, left) };
      const r = await this.client.extend({ ...this.ref, ...(ttl !== undefined ? { ttlMs: ttl } : {}) }, options);
      state = r.state;
      if (r.state === "HELD" && r.lease) this.current = r.lease;
    } catch (e) {
      error = e;
    }
    if (this.released) return;
    if (state === "HELD") {
      this.extensions++;
      this.validUntil = sent + this.lifeMs;
    } else if (state !== undefined) {
      this.controller.abort(new LeaseLostError(`extend answered ${state}`));
      return;
    } else if (performance.now() + this.everyMs >= this.validUntil) {
      const why = error instanceof RateLimitError ? error.message : String(error);
      this.controller.abort(new LeaseLostError(`every extend failed until the lease's expiry (last: ${why})`));
      return;
    }
    this.schedule(this.everyMs);
  }

  /**
   * Stops the heartbeat (abandoning an extend in flight) and gives the slots back (a lost lease
   * too, in case the server still holds it). Later calls return the first call's promise.
   */
  release(): Promise<ReleaseResult> {
    if (!this.released) {
      clearTimeout(this.timer);
      this.inFlight?.abort(new Error("lease released"));
      this.released = this.beating.then(() => this.client.release(this.ref));
    }
    return this.released;
  }

  /** `await using`: releases; a failed release is not thrown (the lease then expires by itself). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release().catch(() => undefined);
  }
}

/** Sleeps `ms` on the real clock. */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Acquires (retrying within `waitMs` while denied) and holds the lease; `timeoutMs` is the
 * client's deadline of each call. performance.now() is the monotonic clock the heartbeat
 * measures expiries on.
 * @internal
 */
export async function holdLease(client: RateLimitClient, request: LeaseRequest, timeoutMs: number, options?: CallOptions): Promise<Lease> {
  if (request.heartbeatMs !== undefined) checkPeriodMs(request.heartbeatMs, "heartbeatMs", " (0: no heartbeat)");
  const giveUpAt = performance.now() + checkPeriodMs(request.waitMs ?? 0, "waitMs");
  for (let attempt = 0; ; attempt++) {
    const sent = performance.now();
    const result = await client.acquire(request, options);
    if (result.allowed && result.lease) return new Lease(client, request, result, sent, timeoutMs);
    const remaining = giveUpAt - performance.now();
    if (remaining <= 0) throw new LeaseDeniedError(result);
    let step = Math.min(50 * 2 ** attempt, 1000, remaining);
    if (result.retryAfterMs !== undefined) step = Math.min(step, Math.max(1, result.retryAfterMs));
    await pause(step);
  }
}
