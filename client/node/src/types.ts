// Typed requests and results of ratelimit.v1.RateLimitService. The field meanings are those of
// proto/ratelimit/v1/ratelimit.proto; durations are milliseconds (fractions allowed, down to the
// protocol's nanoseconds) and instants are Dates.

import type { RateLimitError } from "./errors.js";

/** How a limit refills. */
export type LimitKind = "TOKEN_BUCKET" | "FIXED_WINDOW";

/** Why a limit denied. Absent (undefined) when it allowed. */
export type DenyReason = "INSUFFICIENT_TOKENS" | "COUNT_EXCEEDS_CAPACITY" | "MAX_RESERVED_EXCEEDED";

/** Where a limit is defined, for Reset. */
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
  config?: LimitConfig;
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

/** One path level of an Envoy rule, for Reset of an Envoy limit. */
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
