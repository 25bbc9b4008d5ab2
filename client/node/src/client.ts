import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  ChannelCredentials,
  Metadata,
  credentials as grpcCredentials,
  loadPackageDefinition,
  status,
  type ChannelOptions,
  type Client,
  type ServiceDefinition,
  type ServiceError,
} from "@grpc/grpc-js";
import { fromJSON } from "@grpc/proto-loader";

import {
  acquireResult,
  extendResult,
  leaseList,
  releaseResult,
  wireAcquireRequest,
  wireLeaseRef,
  wireListLeasesRequest,
  type WireAcquireResponse,
  type WireLeaseStateResponse,
  type WireListLeasesResponse,
  batchResults,
  overrideAuditPage,
  overrideOf,
  overridePage,
  rateLimitResult,
  setOverrideResult,
  settleResults,
  wireBatchRequest,
  checkTimeoutMs,
  wireListOverrideAuditRequest,
  wireListOverridesRequest,
  wireOverrideTarget,
  wireRateLimitRequest,
  wireResetRequest,
  wireSetOverrideRequest,
  wireSettleRequest,
  type WireBatchResponse,
  type WireListOverrideAuditResponse,
  type WireListOverridesResponse,
  type WireOverride,
  type WireRateLimitResponse,
  type WireSetOverrideResponse,
  type WireSettleResponse,
} from "./convert.js";
import { RateLimitError } from "./errors.js";
import { holdLease, type Lease, type LeaseRequest } from "./lease.js";
import { LeaseStream, type LeaseMethod } from "./lease-stream.js";
import type { CallOptions, ClientOptions, ReserveAndWaitOptions, TlsOptions } from "./options.js";
import { illFormedError, illFormedField } from "./validate.js";
import { descriptor } from "./generated/descriptor.js";
import type {
  AcquireRequest,
  AcquireResult,
  ExtendResult,
  LeaseList,
  LeaseRef,
  ListLeasesRequest,
  ReleaseResult,
  BatchEntry,
  BatchResult,
  DeleteOverrideRequest,
  LimitRequest,
  ListOverrideAuditRequest,
  ListOverridesRequest,
  Override,
  OverrideAuditEntry,
  OverrideAuditPage,
  OverridePage,
  OverrideTarget,
  RateLimitRequest,
  RateLimitResult,
  ResetRequest,
  SetOverrideRequest,
  SetOverrideResult,
  SettleResult,
  Settlement,
} from "./types.js";

export type { CallOptions, ClientOptions, ReserveAndWaitOptions, TlsOptions } from "./options.js";

/** The deadline of each call when neither the client nor the call sets one: 1 second. */
export const DEFAULT_TIMEOUT_MS = 1000;
/** How many times a Check that found the service UNAVAILABLE is tried again, by default. */
export const DEFAULT_CHECK_RETRIES = 2;

/** The deadline of the Settle (used = 0) that gives back an abandoned reservation. */
const CANCEL_SETTLE_TIMEOUT_MS = 5000;
// A Reserve that failed with one of these may still have been decided by the server.
const OUTCOME_UNKNOWN: ReadonlySet<number> = new Set([status.DEADLINE_EXCEEDED, status.CANCELLED, status.UNAVAILABLE]);

type Callback<T> = (err: ServiceError | null, value?: T) => void;
type UnaryMethod = (
  request: unknown,
  metadata: Metadata,
  options: { deadline: Date },
  callback: Callback<unknown>,
) => { cancel(): void };

const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  bytes: Buffer,
  defaults: true,
  oneofs: false,
};

type ServiceConstructor = (new (target: string, creds: ChannelCredentials, options?: ChannelOptions) => Client) & {
  service: ServiceDefinition;
};

let services: { RateLimitService: ServiceConstructor; OverrideService: ServiceConstructor } | undefined;

function service(name: "RateLimitService" | "OverrideService"): ServiceConstructor {
  if (!services) {
    const definition = fromJSON(descriptor as Parameters<typeof fromJSON>[0], LOADER_OPTIONS);
    const loaded = loadPackageDefinition(definition) as unknown as {
      ratelimit: { v1: NonNullable<typeof services> };
    };
    services = loaded.ratelimit.v1;
  }
  return services[name];
}

/**
 * Resolves once the wall clock has reached `when` (never earlier), or rejects with
 * `signal.reason` as soon as the signal aborts.
 */
export function sleepUntil(when: Date, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const tick = () => {
      const left = when.getTime() - Date.now();
      if (left <= 0) {
        signal?.removeEventListener("abort", onAbort);
        resolve();
        return;
      }
      timer = setTimeout(tick, Math.min(left, 2 ** 31 - 1));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    tick();
  });
}

function readTokenFile(path: string): string {
  const first = readFileSync(path, "utf8").split(/\r?\n/, 1)[0] ?? "";
  return first.trim();
}

function pem(value: string | Buffer | undefined, file: string | undefined): Buffer | null {
  if (value !== undefined) return Buffer.from(value);
  if (file !== undefined) return readFileSync(file);
  return null;
}

function toRequest(request: RateLimitRequest | LimitRequest): RateLimitRequest {
  return "limits" in request ? request : { limits: [request] };
}

/**
 * A typed client of ratelimit.v1.RateLimitService. Every call has a deadline (DEFAULT_TIMEOUT_MS
 * unless set) and rejects with a RateLimitError carrying the gRPC code and the field the server
 * named. One client multiplexes one channel: share it. With the admin token it also administers
 * overrides (ratelimit.v1.OverrideService), on the same channel.
 */
export class RateLimitClient {
  private readonly client: Client;
  /** The OverrideService stub, on the same channel as `client`. */
  private readonly overrides: Client;
  private readonly timeoutMs: number;
  private readonly adminToken: string | undefined;
  private readonly checkRetries: number;
  private readonly retryBackoffMs: number;
  /** With the leaseStream option: carries acquire, release and extend. */
  private readonly leaseStream: LeaseStream | undefined;

  /** Connects (lazily) to `target` ("host:port"). */
  constructor(target: string, options: ClientOptions = {}) {
    this.timeoutMs = checkTimeoutMs(options.timeoutMs ?? DEFAULT_TIMEOUT_MS, "timeoutMs");
    this.checkRetries = options.checkRetries ?? DEFAULT_CHECK_RETRIES;
    this.retryBackoffMs = options.retryBackoffMs ?? 50;
    if (options.adminToken !== undefined) {
      this.adminToken = options.adminToken;
    } else if (options.adminTokenFile !== undefined) {
      this.adminToken = readTokenFile(options.adminTokenFile);
    } else {
      this.adminToken = process.env.RATELIMIT_ADMIN_TOKEN || undefined;
    }
    const channelOptions: ChannelOptions = { ...options.channelOptions };
    let creds = options.credentials;
    if (!creds) {
      const tls = options.tls;
      if (tls) {
        const t: TlsOptions = tls === true ? {} : tls;
        creds = grpcCredentials.createSsl(
          pem(t.ca, t.caFile),
          pem(t.key, t.keyFile),
          pem(t.cert, t.certFile),
        );
        if (t.serverName) {
          channelOptions["grpc.ssl_target_name_override"] = t.serverName;
          channelOptions["grpc.default_authority"] = t.serverName;
        }
      } else {
        creds = grpcCredentials.createInsecure();
      }
    }
    const Service = service("RateLimitService");
    this.client = new Service(target, creds, channelOptions);
    const OverrideService = service("OverrideService");
    this.overrides = new OverrideService(target, creds, { channelOverride: this.client.getChannel() });
    if (options.leaseStream) {
      const unary = (method: LeaseMethod, request: unknown, o: CallOptions | undefined) => this.unary(method, request, o);
      this.leaseStream = new LeaseStream(this.client, Service.service.LeaseStream!, unary, this.timeoutMs, options.logger ?? console);
    }
  }

  /** Takes `count` tokens from every named limit, or from none of them. Never retried. */
  async consume(request: RateLimitRequest | LimitRequest, options?: CallOptions): Promise<RateLimitResult> {
    const w = await this.unary<WireRateLimitResponse>("Consume", wireRateLimitRequest(toRequest(request)), options);
    return rateLimitResult(w);
  }

  /**
   * What Consume would answer now; writes nothing. Retried (up to `checkRetries` times, with a
   * doubling pause) when the service is UNAVAILABLE; each attempt has its own deadline.
   */
  async check(request: RateLimitRequest | LimitRequest, options?: CallOptions): Promise<RateLimitResult> {
    const wire = wireRateLimitRequest(toRequest(request));
    let pause = this.retryBackoffMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return rateLimitResult(await this.unary<WireRateLimitResponse>("Check", wire, options));
      } catch (e) {
        if (!(e instanceof RateLimitError) || e.code !== status.UNAVAILABLE || attempt >= this.checkRetries) {
          throw e;
        }
      }
      await sleepUntil(new Date(Date.now() + pause), options?.signal);
      pause *= 2;
    }
  }

  /**
   * Like Consume, but a limit may go into debt down to -max_reserved; an allowed reservation's
   * `retryAt` is when its pre-paid work may run. Never retried.
   */
  async reserve(request: RateLimitRequest | LimitRequest, options?: CallOptions): Promise<RateLimitResult> {
    const w = await this.unary<WireRateLimitResponse>("Reserve", wireRateLimitRequest(toRequest(request)), options);
    return rateLimitResult(w);
  }

  /**
   * Reserves, then waits until the reservation's `retryAt` (never returning earlier), so that
   * the caller can run its pre-paid work as soon as the promise resolves. A denied reservation
   * resolves at once (allowed: false). When `signal` aborts during the wait, the reservation is
   * cancelled (Settle with used 0, best effort: an unreachable server or one without Settle keeps
   * it) and the promise rejects with `signal.reason`.
   *
   * The same holds when `signal` aborts while the Reserve itself is in flight, or that call
   * times out or is cut off (DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE): the server may have
   * reserved without the answer arriving. The Reserve carries a `requestId` (a random one unless
   * the request has one), so the same Reserve is sent again, on a deadline of its own, to fetch
   * the remembered reservation (or to reserve now), and that is cancelled before the promise
   * rejects. The Reserve always asks for receipts, whatever `omitReceipts` says: giving the
   * reservation back needs them. A `signal` that has already aborted (AbortSignal.timeout too)
   * rejects at once with its reason, and nothing is sent: no Reserve, no Settle.
   */
  async reserveAndWait(
    request: RateLimitRequest | LimitRequest,
    options: ReserveAndWaitOptions = {},
  ): Promise<RateLimitResult> {
    // Nothing is sent for a signal that has already aborted: no Reserve, so nothing to give back.
    if (options.signal?.aborted) throw options.signal.reason;
    const asked: RateLimitRequest = { ...toRequest(request), omitReceipts: false };
    const identified: RateLimitRequest = asked.requestId
      ? asked
      : { ...asked, requestId: randomBytes(16).toString("hex") };
    let result: RateLimitResult;
    try {
      result = await this.reserve(identified, options);
    } catch (e) {
      if (options.signal?.aborted || (e instanceof RateLimitError && OUTCOME_UNKNOWN.has(e.code))) {
        await this.giveBackUnknown(identified);
      }
      throw e;
    }
    if (!result.allowed || !result.retryAt) return result;
    try {
      await (options.sleepUntil ?? sleepUntil)(result.retryAt, options.signal);
    } catch (e) {
      await this.cancelReservation(result);
      throw e;
    }
    return result;
  }

  /**
   * Gives a reservation back (Settle with used 0). Best effort, with a deadline of its own: the
   * caller's signal has fired, and a slow server should still get the reserved tokens back; an
   * unreachable server, or one without Settle, keeps them.
   */
  private async cancelReservation(result: RateLimitResult): Promise<void> {
    const receipts = result.results.flatMap((r) => (r.receipt ? [r.receipt] : []));
    if (receipts.length === 0) return;
    await this.settle(
      receipts.map((receipt) => ({ receipt, used: 0 })),
      { timeoutMs: CANCEL_SETTLE_TIMEOUT_MS },
    ).catch(() => undefined);
  }

  /** Gives back what a Reserve whose outcome is unknown took (best effort; see reserveAndWait). */
  private async giveBackUnknown(request: RateLimitRequest): Promise<void> {
    let again: RateLimitResult;
    try {
      again = await this.reserve(request, { timeoutMs: CANCEL_SETTLE_TIMEOUT_MS });
    } catch {
      return; // unreachable: the reservation stays, as after an abort during the wait
    }
    await this.cancelReservation(again);
  }

  /**
   * Settles what allowed Consume and Reserve calls took, once the caller knows what it used:
   * all-or-nothing, each receipt at most once. Never retried.
   */
  async settle(settlements: Settlement[], options?: CallOptions): Promise<SettleResult[]> {
    const w = await this.unary<WireSettleResponse>("Settle", wireSettleRequest(settlements), options);
    return settleResults(w);
  }

  /**
   * Sends independent Consume/Check/Reserve requests in one call. The server decides them in
   * order (a later entry sees the effect of the earlier ones), each all-or-nothing on its own,
   * and answers each on its own: one BatchResult per entry, in order, with its `result` or its
   * own `error` (not thrown). Rejects only for the whole call (no entries, over the server's
   * bounds, unreachable). Never retried.
   */
  async batch(entries: BatchEntry[], options?: CallOptions): Promise<BatchResult[]> {
    const wire = wireBatchRequest(entries.map((e) => ({ method: e.method, request: toRequest(e.request) })));
    return batchResults(await this.unary<WireBatchResponse>("Batch", wire, options));
  }

  /**
   * Administrative: resets one key (`key`) or every key (`allKeys: true`) of a limit. Sends the
   * admin token (adminToken, adminTokenFile, else $RATELIMIT_ADMIN_TOKEN). The server's refusal
   * rejects as it answered it, code and message unchanged: UNAUTHENTICATED without a token (on a
   * server that has one), PERMISSION_DENIED for a wrong one, and PERMISSION_DENIED "Reset is
   * disabled ..." from a server started without an admin token.
   */
  async reset(request: ResetRequest, options?: CallOptions): Promise<void> {
    await this.unary<unknown>("Reset", wireResetRequest(request), options, this.adminMetadata());
  }

  // Concurrency limits (kind CONCURRENCY): at most `capacity` slots held at once, taken for a
  // lease that ends when released or when it expires unextended. Never retried.

  /**
   * Takes slots of one concurrency limit, with the tokens of any rate limits, all or nothing. A
   * denial is a value (allowed: false, retryAfterMs), not an error. Nothing extends the lease:
   * see `lease` for a held one.
   */
  async acquire(request: AcquireRequest, options?: CallOptions): Promise<AcquireResult> {
    return acquireResult(await this.leaseCall<WireAcquireResponse>("Acquire", wireAcquireRequest(request), options));
  }

  /** Gives a lease's slots back: RELEASED, or NOT_HELD (nothing changed; a retry is harmless). */
  async release(ref: LeaseRef, options?: CallOptions): Promise<ReleaseResult> {
    return releaseResult(await this.leaseCall<WireLeaseStateResponse>("Release", wireLeaseRef(ref), options));
  }

  /**
   * Pushes a held lease's expiry to now + ttlMs (default: the limit's lease TTL): HELD with the
   * new expiry, or NOT_HELD (nothing changed: the holder has lost its slots and should stop).
   * A ttlMs under 1 ms (0 too), negative or not finite is a TypeError, before any call.
   */
  async extend(ref: LeaseRef & { ttlMs?: number }, options?: CallOptions): Promise<ExtendResult> {
    return extendResult(await this.leaseCall<WireLeaseStateResponse>("Extend", wireLeaseRef(ref, ref.ttlMs), options));
  }

  /**
   * Administrative (sends the admin token, as reset does): the leases held on one key, a page
   * at a time (pageSize, pageToken: the previous page's nextPageToken).
   */
  async listLeases(request: ListLeasesRequest, options?: CallOptions): Promise<LeaseList> {
    const w = await this.unary<WireListLeasesResponse>("ListLeases", wireListLeasesRequest(request), options, this.adminMetadata());
    return leaseList(w);
  }

  /**
   * Acquires and holds a lease, extended in the background (see Lease) until released:
   * `await using lease = await client.lease({ limits: [{ name: "jobs", key: tenant }] })`.
   * A denial rejects with a LeaseDeniedError carrying retryAfterMs, after `waitMs` of retries
   * when given. `options` are each Acquire's (its deadline, a signal to give up).
   */
  lease(request: LeaseRequest, options?: CallOptions): Promise<Lease> {
    return holdLease(this, request, this.timeoutMs, options);
  }

  /**
   * Runs `fn` while holding a lease, and releases it when `fn` settles (resolves or throws).
   * `fn` gets the lease; its `signal` aborts if the lease is lost.
   */
  async withLease<T>(request: LeaseRequest, fn: (lease: Lease) => Promise<T> | T): Promise<T> {
    const lease = await this.lease(request);
    try {
      return await fn(lease);
    } finally {
      await lease[Symbol.asyncDispose]();
    }
  }

  // Overrides (ratelimit.v1.OverrideService, docs/overrides.md): administrative like reset,
  // each sends the admin token and rejects as the server answered. Never retried.

  /**
   * Creates the override of `request.target`, or replaces it. Resolves to the override as stored
   * and the one it replaced. A bad field rejects with INVALID_ARGUMENT naming it
   * (`override.limit.rate`); a name the limits file does not define, NOT_FOUND. More than one
   * effect, or both expiresAt and expiresInMs, throws a TypeError without calling.
   */
  async setOverride(request: SetOverrideRequest, options?: CallOptions): Promise<SetOverrideResult> {
    const wire = wireSetOverrideRequest(request);
    return setOverrideResult(await this.admin<WireSetOverrideResponse>("SetOverride", wire, options));
  }

  /** The override of `target` (an expired one too); rejects with NOT_FOUND when it has none. */
  async getOverride(target: OverrideTarget, options?: CallOptions): Promise<Override> {
    const w = await this.admin<{ override: WireOverride }>("GetOverride", { target: wireOverrideTarget(target) }, options);
    return overrideOf(w.override);
  }

  /**
   * Deletes the override of `request.target` and resolves to it: its keys go back to the
   * configured limit. Rejects with NOT_FOUND when it has none.
   */
  async deleteOverride(request: DeleteOverrideRequest, options?: CallOptions): Promise<Override> {
    const wire = { target: wireOverrideTarget(request.target), reason: request.reason ?? "", actor: request.actor ?? "" };
    const w = await this.admin<{ deleted: WireOverride }>("DeleteOverride", wire, options);
    return overrideOf(w.deleted);
  }

  /** One page of overrides, in (name, target) order, expired ones included. */
  async listOverrides(request: ListOverridesRequest = {}, options?: CallOptions): Promise<OverridePage> {
    const wire = wireListOverridesRequest(request);
    return overridePage(await this.admin<WireListOverridesResponse>("ListOverrides", wire, options));
  }

  /**
   * Every override listOverrides would page through from `request.pageToken`, fetching each page
   * (with its own deadline) as the loop reaches it: `for await (const o of client.allOverrides())`.
   */
  async *allOverrides(request: ListOverridesRequest = {}, options?: CallOptions): AsyncGenerator<Override> {
    let pageToken = request.pageToken ?? "";
    do {
      const page = await this.listOverrides({ ...request, pageToken }, options);
      yield* page.overrides;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** One page of the audit history of the overrides, newest first. */
  async listOverrideAudit(request: ListOverrideAuditRequest = {}, options?: CallOptions): Promise<OverrideAuditPage> {
    const wire = wireListOverrideAuditRequest(request);
    return overrideAuditPage(await this.admin<WireListOverrideAuditResponse>("ListOverrideAudit", wire, options));
  }

  /** Every audit entry, newest first, fetching each page as the loop reaches it. */
  async *allOverrideAudit(request: ListOverrideAuditRequest = {}, options?: CallOptions): AsyncGenerator<OverrideAuditEntry> {
    let pageToken = request.pageToken ?? "";
    do {
      const page = await this.listOverrideAudit({ ...request, pageToken }, options);
      yield* page.entries;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  private adminMetadata(): Metadata {
    const metadata = new Metadata();
    if (this.adminToken) metadata.set("authorization", `Bearer ${this.adminToken}`);
    return metadata;
  }

  private admin<T>(method: string, request: unknown, options: CallOptions | undefined): Promise<T> {
    return this.unary<T>(method, request, options, this.adminMetadata(), this.overrides);
  }

  /**
   * Closes the channel; calls in flight fail. The lease stream is half-closed (the ops sent on it
   * are still answered) and cancelled once none waits.
   */
  close(): void {
    this.leaseStream?.close();
    this.client.close();
  }

  /** Acquire, Release or Extend: an op of the lease stream (leaseStream option), else a call. */
  private leaseCall<T>(method: LeaseMethod, request: unknown, options: CallOptions | undefined): Promise<T> {
    return (this.leaseStream ? this.leaseStream.send(method, request, options) : this.unary(method, request, options)) as Promise<T>;
  }

  private unary<T>(
    method: string,
    request: unknown,
    options: CallOptions | undefined,
    metadata: Metadata = new Metadata(),
    stub: Client = this.client,
  ): Promise<T> {
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    // protobufjs would send a lone surrogate as invalid UTF-8, which the server refuses naming no field.
    const illFormed = illFormedField(request);
    if (illFormed !== undefined) return Promise.reject(illFormedError(illFormed));
    let timeoutMs: number;
    try {
      // NaN or Infinity would make grpc-js throw outside the promise, ending the process.
      timeoutMs = checkTimeoutMs(options?.timeoutMs ?? this.timeoutMs, "timeoutMs");
    } catch (e) {
      return Promise.reject(e);
    }
    const deadline = new Date(Date.now() + timeoutMs);
    const fn = (stub as unknown as Record<string, UnaryMethod>)[method]!;
    return new Promise<T>((resolve, reject) => {
      let aborted = false;
      const onAbort = () => {
        aborted = true;
        call.cancel();
        reject(signal!.reason);
      };
      const call = fn.call(stub, request, metadata, { deadline }, (err, value) => {
        signal?.removeEventListener("abort", onAbort);
        if (aborted) return;
        if (err) reject(RateLimitError.fromServiceError(err));
        else resolve(value as T);
      });
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}
