// Typed requests and results of ratelimit.v1.RateLimitService. The field meanings are those of
// proto/ratelimit/v1/ratelimit.proto; durations are milliseconds (fractions allowed, down to the
// protocol's nanoseconds) and instants are Dates.

import type { RateLimitError } from "./errors.js";

/** How a limit refills. */
export type LimitKind = "TOKEN_BUCKET" | "FIXED_WINDOW";

/**
 * Why a limit denied. Absent (undefined) when it allowed, and for a reason added to the protocol
 * after this client was written. BLOCKED: an override blocks the key (no retry time is given).
 */
export type DenyReason =
  | "INSUFFICIENT_TOKENS"
  | "COUNT_EXCEEDS_CAPACITY"
  | "MAX_RESERVED_EXCEEDED"
  | "BLOCKED"
  /** A concurrency limit has fewer free slots than the count (retryAt: when enough leases expire). */
  | "NO_FREE_SLOTS";

/** Where a limit is defined, for Reset and overrides. */
export type LimitSource = "LIMITS_FILE" | "INLINE" | "ENVOY";

/** A limit's definition, given inline for a name the server does not define. */
export interface LimitConfig {
  kind: LimitKind;
  /** Tokens added per period: finite, > 0. */
  rate: number;
  /** The period `rate` refers to, in milliseconds (1 µs .. 100 years). */
  periodMs: number;
  /** The most tokens that can accumulate. Default (server side): `rate`. */
  capacity?: number;
  /** The most tokens reservations may owe. Unset: unbounded; 0: no reservations. */
  maxReserved?: number;
  /** Fixed windows only: offset of the window boundaries from the epoch, in ms. Unset: per-key. */
  startMs?: number;
  /** 0..1: a denied caller's retry time is pushed later by up to jitter·period. Default 0. */
  jitter?: number;
}

/** One limit to evaluate. */
export interface LimitRequest {
  /** The limit's name (limits file, or defined by `config`). */
  name: string;
  /** Which counter of that limit (a user id, an API key, "global"...). */
  key: string;
  /** Tokens to take. Default 1. */
  count?: number;
  /** Inline definition, for a name the server does not define. */
  config?: LimitConfig | ConcurrencyConfig;
}

/**
 * An inline concurrency limit (kind CONCURRENCY): at most `capacity` slots held at once, taken
 * by `acquire` / `lease` for a lease that ends when released or when it expires unextended.
 */
export interface ConcurrencyConfig {
  kind: "CONCURRENCY";
  /** Whole slots, 1..1e9. */
  capacity: number;
  /** The TTL of a lease whose acquire gives none, in ms. Server default: 30 s. */
  leaseTtlMs?: number;
  /** The longest TTL an acquire or extend may ask for, in ms. Server default: max(leaseTtl, 1 h). */
  maxLeaseTtlMs?: number;
}

/** A request: 1..16 limits, evaluated together, all-or-nothing. */
export interface RateLimitRequest {
  limits: LimitRequest[];
  /**
   * Idempotency key (1..128 bytes) of a Consume or Reserve: the server answers a retry carrying
   * the same id with its remembered answer (`replayed: true`) instead of deciding again.
   */
  requestId?: string;
  /**
   * For callers that never settle: an allowed Consume or Reserve answers without receipts
   * (LimitResult.receipt absent), sparing the server the signing and the reply ~100 bytes per
   * limit. Nothing else changes; a reservation taken so cannot be given back. Ignored by
   * `reserveAndWait`, which needs the receipts to give an abandoned reservation back.
   */
  omitReceipts?: boolean;
}

/** The verdict on one limit of a request. */
export interface LimitResult {
  name: string;
  key: string;
  /** Whether this limit, on its own, allows the request. */
  allowed: boolean;
  /** Tokens available after the decision (negative while reservations owe tokens). */
  value: number;
  /** The limit's capacity. */
  capacity: number;
  /**
   * When the caller must wait: for a denial, the earliest time a retry can succeed; for an
   * allowed reservation, when its work may run. Rounded up to the millisecond, so waiting until
   * it is never early.
   */
  retryAt?: Date;
  /** retryAt minus the server's time, in ms. */
  retryAfterMs?: number;
  reason?: DenyReason;
  /** For an allowed Consume or Reserve: the receipt to give to `settle`. */
  receipt?: Uint8Array;
  /**
   * The key or key pattern of the override that set this limit for the key; absent when the
   * configured limit decided.
   */
  override?: string;
}

/** The answer to Consume, Check or Reserve. */
export interface RateLimitResult {
  /** True when every limit allowed (and, for Consume and Reserve, every one was taken). */
  allowed: boolean;
  /** One result per requested limit, in request order. */
  results: LimitResult[];
  /**
   * On denial: the latest retry time among the denying limits (absent when one of them can
   * never allow). For an allowed reservation: when its work may run. Rounded up to the ms.
   */
  retryAt?: Date;
  retryAfterMs?: number;
  /** The reason of the limit named by `deniedBy`. */
  reason?: DenyReason;
  /** Index into `results` of the limit that decided the denial; -1 when allowed. */
  deniedBy: number;
  /** True when the server's store failed and its failure policy let the request through. */
  failedOpen: boolean;
  /** True when this is the remembered answer to an earlier request with the same requestId. */
  replayed: boolean;
}

/** One path level of an Envoy rule, for Reset of an Envoy limit or an override of one. */
export interface EnvoyPathEntry {
  key: string;
  value?: string;
}

/** What to reset: one key of a limit (`key`), or every key (`allKeys: true`). */
export interface ResetRequest {
  /** LIMITS_FILE and INLINE: the limit name. ENVOY: the domain. */
  name: string;
  key?: string;
  allKeys?: boolean;
  /** Default LIMITS_FILE. */
  source?: LimitSource;
  envoyPath?: EnvoyPathEntry[];
  envoyOverride?: boolean;
}

/** What one receipt's take really used. */
export interface Settlement {
  /** A receipt from LimitResult.receipt. */
  receipt: Uint8Array;
  /** Tokens actually used: less than the receipt's count gives the rest back, more charges. */
  used: number;
}

/** The outcome of one settlement. */
export interface SettleResult {
  name: string;
  key: string;
  /** Tokens given back to the limit. */
  returned: number;
  /** Tokens charged for `used - count`, as a reservation. */
  charged: number;
  /** The part of `used - count` that could not be charged (the debt is capped at max_reserved). */
  uncharged: number;
  /** The limit's balance after the settlement. */
  value: number;
  /** Set when the balance is negative: when the debt is paid off. Rounded up to the ms. */
  paidAt?: Date;
  paidAfterMs?: number;
}

/** What an entry of a batch asks for. */
export type BatchMethod = "CONSUME" | "CHECK" | "RESERVE";

/** One request of a batch. Its requestId must be unset (the server refuses an entry carrying one). */
export interface BatchEntry {
  /** Default "CONSUME". */
  method?: BatchMethod;
  request: RateLimitRequest | LimitRequest;
}

/**
 * The answer to one entry of a batch: its result, or its own error (a RateLimitError whose
 * `field` names the entry, e.g. "entries[2].limits[0].count").
 */
export type BatchResult =
  | { result: RateLimitResult; error?: undefined }
  | { result?: undefined; error: RateLimitError };

/**
 * What an override applies to: a limit and exactly one of `key` (one key, matched exactly) or
 * `keyPattern` (the keys matching it: `*` matches any run of bytes).
 */
export interface OverrideTarget {
  /** LIMITS_FILE (the default) or ENVOY. */
  source?: LimitSource;
  /** The limit's name in the limits file (ENVOY: the domain). */
  name: string;
  key?: string;
  keyPattern?: string;
  /** ENVOY only: the rule's descriptor path, one entry per level (values empty). */
  envoyPath?: EnvoyPathEntry[];
}

/** The new limit of an override: a field left unset keeps the configured value. */
export interface OverrideLimit {
  rate?: number;
  /** In milliseconds; not for a fixed window. */
  periodMs?: number;
  capacity?: number;
  maxReserved?: number;
}

/**
 * An override to set. Give exactly one effect: `limit`, `unlimited: true` (every request allowed,
 * nothing taken) or `blocked: true` (every request denied with BLOCKED). `expiresAt`, or
 * `expiresInMs` from now, ends it by itself (neither: never). `reason` and `actor` (who the
 * caller says it is) are recorded in the audit history.
 */
export interface SetOverrideRequest {
  target: OverrideTarget;
  limit?: OverrideLimit;
  unlimited?: boolean;
  blocked?: boolean;
  expiresAt?: Date;
  expiresInMs?: number;
  reason?: string;
  actor?: string;
}

/** An override as the server stores it. Exactly one of `limit`, `unlimited` and `blocked`. */
export interface Override {
  target: OverrideTarget;
  limit?: OverrideLimit;
  unlimited: boolean;
  blocked: boolean;
  /** When it ends by itself; absent: never. */
  expiresAt?: Date;
  reason: string;
  /** The caller's actor and the credential that authorised it ("alice (token)"). */
  setBy: string;
  setAt?: Date;
  /** It has ended but was not deleted. */
  expired: boolean;
  /** Its limit is no longer in the limits file: it changes no decision. */
  inert: boolean;
}

/** The answer to setOverride: the override as stored, and the one it replaced (if any). */
export interface SetOverrideResult {
  override: Override;
  replaced?: Override;
}

/** Deletes the override of `target`; `reason` and `actor` are recorded in the audit history. */
export interface DeleteOverrideRequest {
  target: OverrideTarget;
  reason?: string;
  actor?: string;
}

/**
 * One page of the overrides of `source` (default LIMITS_FILE), of the limit `name` or of every
 * limit. `pageSize`: 1..1000 (default 100); `pageToken`: the previous page's nextPageToken.
 */
export interface ListOverridesRequest {
  source?: LimitSource;
  name?: string;
  pageSize?: number;
  pageToken?: string;
}

/** A page of overrides, in (name, target) order; `nextPageToken` is "" after the last page. */
export interface OverridePage {
  overrides: Override[];
  nextPageToken: string;
}

/** One page of the audit history, of the limit `name` or of every limit; paged as above. */
export interface ListOverrideAuditRequest {
  name?: string;
  pageSize?: number;
  pageToken?: string;
}

/** One change of the overrides. */
export interface OverrideAuditEntry {
  /** Increasing with each change. */
  sequence: number;
  at?: Date;
  /** "set" or "delete". */
  action: string;
  /** The credential that authorised the change: "token" or "identity <SAN>". */
  authorizedBy: string;
  /** Who the caller said it was, and its address. */
  actor: string;
  peer: string;
  reason: string;
  /** Absent for a new override. */
  before?: Override;
  /** Absent for a deletion. */
  after?: Override;
}

/** A page of the audit history, newest first; `nextPageToken` is "" after the last page. */
export interface OverrideAuditPage {
  entries: OverrideAuditEntry[];
  nextPageToken: string;
}

/** Whether a lease is held: the answer to release ("RELEASED" or "NOT_HELD") and extend ("HELD" or "NOT_HELD"). */
export type LeaseState = "HELD" | "RELEASED" | "NOT_HELD";

/** A lease on `count` slots of the concurrency limit (name, key), as the server describes it. */
export interface LeaseInfo {
  id: string;
  name: string;
  key: string;
  source: LimitSource;
  count: number;
  acquiredAt: Date;
  /** When the lease ends by itself unless extended. */
  expiresAt: Date;
  /** What the acquirer said about itself (AcquireRequest.holder). */
  holder: string;
}

/** Slots of one concurrency limit, with the tokens of any rate limits, all or nothing. */
export interface AcquireRequest {
  /** Exactly one concurrency limit (`count`: whole slots, default 1) and any rate limits; 1..16. */
  limits: LimitRequest[];
  /**
   * The lease's TTL in ms (1 ms .. the limit's max lease TTL). Default: the limit's lease TTL.
   * One under 1 ms (0 too), a negative one or one not finite is a TypeError, before any call.
   */
  ttlMs?: number;
  /** Idempotency key (1..128 bytes): a retry answers the same lease (`replayed`) and takes nothing. */
  requestId?: string;
  /** Free text naming the holder (a pod, a job id), 0..256 bytes, shown by listLeases. */
  holder?: string;
}

/** The answer to acquire. A denial is a value (allowed: false, retryAfterMs), not an error. */
export interface AcquireResult {
  allowed: boolean;
  /** The lease; set when allowed. */
  lease?: LeaseInfo;
  /** One per requested limit, in request order; the concurrency limit's `value` is its free slots. */
  results: LimitResult[];
  /** On denial: when a retry can succeed (for NO_FREE_SLOTS, when enough leases expire). */
  retryAt?: Date;
  retryAfterMs?: number;
  reason?: DenyReason;
  /** Index into `results` of the limit that decided the denial; -1 when allowed. */
  deniedBy: number;
  /** True when this answers a retry with the same requestId: its lease, nothing taken. */
  replayed: boolean;
}

/** A lease, by its concurrency limit (`config` for an inline one) and id. */
export interface LeaseRef {
  name: string;
  key: string;
  leaseId: string;
  config?: ConcurrencyConfig;
}

/** The answer to release: RELEASED or NOT_HELD, and the slots held on the key after it. */
export interface ReleaseResult {
  state: LeaseState;
  held: number;
}

/** The answer to extend: HELD (with the new expiry) or NOT_HELD (the holder lost its slots). */
export interface ExtendResult {
  state: LeaseState;
  lease?: LeaseInfo;
}

/** One key of a concurrency limit, for listLeases. */
export interface ListLeasesRequest {
  name: string;
  key: string;
  /** Default: INLINE when `config` is given, LIMITS_FILE otherwise. */
  source?: LimitSource;
  config?: ConcurrencyConfig;
  /** The most leases in the answer, 1..1000 (default: the server's 100). */
  pageSize?: number;
  /** The previous page's nextPageToken (default: the first page). */
  pageToken?: string;
}

/**
 * A page of the leases held on a key, soonest expiry first; the slots held and the capacity
 * (the whole key's); nextPageToken, when more leases follow, the next page's pageToken ("" after
 * the last).
 */
export interface LeaseList {
  leases: LeaseInfo[];
  held: number;
  capacity: number;
  nextPageToken: string;
}
