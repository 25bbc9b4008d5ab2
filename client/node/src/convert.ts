// Conversions between the typed API (types.ts) and the wire objects of @grpc/proto-loader
// (keepCase, longs as strings, enums as strings, bytes as Buffers).
import { RateLimitError } from "./errors.js";
import { checkLeaseTtlMs } from "./validate.js";
import type {
  AcquireRequest,
  AcquireResult,
  ConcurrencyConfig,
  ExtendResult,
  LeaseInfo,
  LeaseList,
  LeaseRef,
  LeaseState,
  LimitConfig,
  ListLeasesRequest,
  ReleaseResult,
  BatchResult,
  DenyReason,
  LimitRequest,
  LimitResult,
  ListOverrideAuditRequest,
  ListOverridesRequest,
  LimitSource,
  Override,
  OverrideAuditPage,
  OverrideLimit,
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

export interface WireDuration {
  seconds: string | number;
  nanos: number;
}
export type WireTimestamp = WireDuration;

/** The longest google.protobuf.Duration, in ms: 315,576,000,000 s (10,000 years). */
const MAX_DURATION_MS = 315_576_000_000_000;

/**
 * Milliseconds (finite, fractions allowed, within a Duration's ±10,000 years) as a
 * google.protobuf.Duration. Past that range the seconds would be written in exponent form
 * ("1e+297"), which protobufjs reads as another number (1): refused instead.
 */
export function durationFromMs(ms: number, field: string): WireDuration {
  if (typeof ms !== "number" || !Number.isFinite(ms)) {
    throw new TypeError(`${field}: must be a finite number of milliseconds, got ${String(ms)}`);
  }
  if (Math.abs(ms) > MAX_DURATION_MS) {
    throw new TypeError(`${field}: must be within a Duration's 10,000 years (3.15576e14 ms), got ${String(ms)}`);
  }
  const negative = ms < 0;
  const abs = Math.abs(ms);
  let seconds = Math.floor(abs / 1000);
  let nanos = Math.round((abs - seconds * 1000) * 1e6);
  if (nanos >= 1e9) {
    seconds += 1;
    nanos -= 1e9;
  }
  // A negative duration has both parts <= 0; the server then names the field.
  return negative ? { seconds: String(-seconds), nanos: -nanos } : { seconds: String(seconds), nanos };
}

/** A google.protobuf.Duration as milliseconds. */
export function msFromDuration(d: WireDuration): number {
  return Number(d.seconds) * 1000 + (d.nanos ?? 0) / 1e6;
}

/**
 * A google.protobuf.Timestamp as a Date, rounded up to the millisecond: a Date cannot hold the
 * nanoseconds, and a time to wait for must never be moved earlier.
 */
export function dateFromTimestamp(t: WireTimestamp): Date {
  return new Date(Number(t.seconds) * 1000 + Math.ceil((t.nanos ?? 0) / 1e6));
}

function present<T>(v: T | null | undefined): v is T {
  return v !== null && v !== undefined;
}

function wireLimit(limit: LimitRequest, i: number): Record<string, unknown> {
  const out: Record<string, unknown> = { name: limit.name, key: limit.key };
  if (present(limit.count)) out.count = limit.count;
  if (present(limit.config)) out.config = wireConfig(limit.config, `limits[${i}].config`);
  return out;
}

/** An inline config on the wire; `field` names it in the TypeError of a bad duration. */
export function wireConfig(c: LimitConfig | ConcurrencyConfig, field: string): Record<string, unknown> {
  if (c.kind === "CONCURRENCY") {
    const config: Record<string, unknown> = { kind: c.kind, capacity: c.capacity };
    if (present(c.leaseTtlMs)) config.lease_ttl = durationFromMs(c.leaseTtlMs, `${field}.leaseTtlMs`);
    if (present(c.maxLeaseTtlMs)) config.max_lease_ttl = durationFromMs(c.maxLeaseTtlMs, `${field}.maxLeaseTtlMs`);
    return config;
  }
  const config: Record<string, unknown> = {
    kind: c.kind,
    rate: c.rate,
    period: durationFromMs(c.periodMs, `${field}.periodMs`),
  };
  if (present(c.capacity)) config.capacity = c.capacity;
  if (present(c.maxReserved)) config.max_reserved = c.maxReserved;
  if (present(c.startMs)) config.start = durationFromMs(c.startMs, `${field}.startMs`);
  if (present(c.jitter)) config.jitter = c.jitter;
  return config;
}

export function wireRateLimitRequest(request: RateLimitRequest): Record<string, unknown> {
  return {
    limits: (request.limits ?? []).map(wireLimit),
    request_id: request.requestId ?? "",
    omit_receipts: request.omitReceipts ?? false,
  };
}

const BATCH_METHODS: ReadonlySet<string> = new Set(["CONSUME", "CHECK", "RESERVE"]);

/** The wire BatchRequest. A method other than CONSUME, CHECK or RESERVE is a TypeError. */
export function wireBatchRequest(
  entries: { method?: string; request: RateLimitRequest }[],
): Record<string, unknown> {
  return {
    entries: entries.map((e, i) => {
      const method = e.method ?? "CONSUME";
      // protobufjs would send an unknown name as 0, CONSUME: a Check would take tokens.
      if (!BATCH_METHODS.has(method)) {
        throw new TypeError(`entries[${i}].method: must be CONSUME, CHECK or RESERVE, got ${JSON.stringify(e.method)}`);
      }
      return { method, request: wireRateLimitRequest(e.request) };
    }),
  };
}

/** The longest deadline a call takes: 1e11 ms, about three years (grpc-js sends no longer one). */
export const MAX_TIMEOUT_MS = 1e11;

/** A deadline in ms: positive, at most MAX_TIMEOUT_MS, else a TypeError naming `field`. */
export function checkTimeoutMs(ms: number, field: string): number {
  if (typeof ms !== "number" || !(ms > 0 && ms <= MAX_TIMEOUT_MS)) {
    throw new TypeError(
      `${field}: must be a positive, finite number of milliseconds, at most 1e11 (about three years), got ${String(ms)}`,
    );
  }
  return ms;
}

export function wireResetRequest(request: ResetRequest): Record<string, unknown> {
  return {
    name: request.name,
    key: request.key ?? "",
    all_keys: request.allKeys ?? false,
    source: request.source ?? "LIMITS_FILE",
    envoy_path: (request.envoyPath ?? []).map((e) => ({ key: e.key, value: e.value ?? "" })),
    envoy_override: request.envoyOverride ?? false,
  };
}

export function wireSettleRequest(settlements: Settlement[]): Record<string, unknown> {
  return {
    settlements: settlements.map((s) => ({ receipt: Buffer.from(s.receipt), used: s.used })),
  };
}

// A reason this client does not know (a newer server's) reads as absent, like no reason.
function reasonOf(r: unknown): DenyReason | undefined {
  if (
    r === "INSUFFICIENT_TOKENS" ||
    r === "COUNT_EXCEEDS_CAPACITY" ||
    r === "MAX_RESERVED_EXCEEDED" ||
    r === "BLOCKED" ||
    r === "NO_FREE_SLOTS"
  ) {
    return r;
  }
  return undefined;
}

interface WireLimitResult {
  name: string;
  key: string;
  allowed: boolean;
  value: number;
  retry_at?: WireTimestamp | null;
  retry_after?: WireDuration | null;
  reason: string;
  capacity: number;
  receipt?: Buffer | null;
  override?: string;
}

export interface WireRateLimitResponse {
  allowed: boolean;
  results: WireLimitResult[];
  retry_at?: WireTimestamp | null;
  retry_after?: WireDuration | null;
  reason: string;
  denied_by: number;
  failed_open: boolean;
  replayed: boolean;
}

function limitResult(w: WireLimitResult): LimitResult {
  const r: LimitResult = {
    name: w.name,
    key: w.key,
    allowed: Boolean(w.allowed),
    value: Number(w.value ?? 0),
    capacity: Number(w.capacity ?? 0),
  };
  if (present(w.retry_at)) r.retryAt = dateFromTimestamp(w.retry_at);
  if (present(w.retry_after)) r.retryAfterMs = msFromDuration(w.retry_after);
  const reason = reasonOf(w.reason);
  if (reason) r.reason = reason;
  if (present(w.receipt) && w.receipt.length > 0) r.receipt = new Uint8Array(w.receipt);
  if (w.override) r.override = w.override;
  return r;
}

export function rateLimitResult(w: WireRateLimitResponse): RateLimitResult {
  const r: RateLimitResult = {
    allowed: Boolean(w.allowed),
    results: (w.results ?? []).map(limitResult),
    deniedBy: w.allowed ? -1 : Number(w.denied_by ?? -1),
    failedOpen: Boolean(w.failed_open),
    replayed: Boolean(w.replayed),
  };
  if (present(w.retry_at)) r.retryAt = dateFromTimestamp(w.retry_at);
  if (present(w.retry_after)) r.retryAfterMs = msFromDuration(w.retry_after);
  const reason = reasonOf(w.reason);
  if (reason) r.reason = reason;
  return r;
}

interface WireSettleResult {
  name: string;
  key: string;
  returned: number;
  charged: number;
  uncharged: number;
  value: number;
  paid_at?: WireTimestamp | null;
  paid_after?: WireDuration | null;
}

export interface WireSettleResponse {
  results: WireSettleResult[];
}

export function settleResults(w: WireSettleResponse): SettleResult[] {
  return (w.results ?? []).map((s) => {
    const r: SettleResult = {
      name: s.name,
      key: s.key,
      returned: Number(s.returned ?? 0),
      charged: Number(s.charged ?? 0),
      uncharged: Number(s.uncharged ?? 0),
      value: Number(s.value ?? 0),
    };
    if (present(s.paid_at)) r.paidAt = dateFromTimestamp(s.paid_at);
    if (present(s.paid_after)) r.paidAfterMs = msFromDuration(s.paid_after);
    return r;
  });
}

export interface WireBatchResponse {
  results: { response?: WireRateLimitResponse | null; error?: { code: number; message: string } | null }[];
}

export function batchResults(w: WireBatchResponse): BatchResult[] {
  return (w.results ?? []).map((r): BatchResult => {
    if (present(r.error)) return { error: new RateLimitError(Number(r.error.code), r.error.message ?? "") };
    return { result: rateLimitResult(r.response ?? ({ results: [] } as unknown as WireRateLimitResponse)) };
  });
}

/** A Date as a google.protobuf.Timestamp (milliseconds; the server keeps microseconds). */
function timestampFromDate(d: Date, field: string): WireTimestamp {
  const ms = d instanceof Date ? d.getTime() : NaN;
  if (!Number.isFinite(ms)) throw new TypeError(`${field}: must be a valid Date`);
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

export function wireOverrideTarget(t: OverrideTarget): Record<string, unknown> {
  return {
    source: t.source ?? "LIMITS_FILE",
    name: t.name,
    key: t.key ?? "",
    key_pattern: t.keyPattern ?? "",
    envoy_path: (t.envoyPath ?? []).map((e) => ({ key: e.key, value: e.value ?? "" })),
  };
}

/**
 * The wire SetOverrideRequest. More than one effect, or both expiry forms, is a TypeError; no
 * effect at all is sent as is, for the server to name (`override.effect`).
 */
export function wireSetOverrideRequest(r: SetOverrideRequest, now: number = Date.now()): Record<string, unknown> {
  const effects = [present(r.limit), Boolean(r.unlimited), Boolean(r.blocked)].filter(Boolean).length;
  if (effects > 1) throw new TypeError("an override is one of: limit, unlimited: true or blocked: true");
  if (present(r.expiresAt) && present(r.expiresInMs)) {
    throw new TypeError("give expiresAt or expiresInMs, not both");
  }
  const o: Record<string, unknown> = { target: wireOverrideTarget(r.target), reason: r.reason ?? "" };
  const l = r.limit;
  if (present(l)) {
    const limit: Record<string, unknown> = {};
    if (present(l.rate)) limit.rate = l.rate;
    if (present(l.periodMs)) limit.period = durationFromMs(l.periodMs, "limit.periodMs");
    if (present(l.capacity)) limit.capacity = l.capacity;
    if (present(l.maxReserved)) limit.max_reserved = l.maxReserved;
    o.limit = limit;
  } else if (r.unlimited) {
    o.unlimited = true;
  } else if (r.blocked) {
    o.blocked = true;
  }
  if (present(r.expiresInMs)) {
    if (typeof r.expiresInMs !== "number" || !Number.isFinite(r.expiresInMs)) {
      throw new TypeError(`expiresInMs: must be a finite number of milliseconds, got ${String(r.expiresInMs)}`);
    }
    o.expires_at = timestampFromDate(new Date(now + r.expiresInMs), "expiresInMs");
  } else if (present(r.expiresAt)) {
    o.expires_at = timestampFromDate(r.expiresAt, "expiresAt");
  }
  return { override: o, actor: r.actor ?? "" };
}

export function wireListOverridesRequest(r: ListOverridesRequest): Record<string, unknown> {
  return {
    source: r.source ?? "LIMITS_FILE",
    name: r.name ?? "",
    page_size: r.pageSize ?? 0,
    page_token: r.pageToken ?? "",
  };
}

export function wireListOverrideAuditRequest(r: ListOverrideAuditRequest): Record<string, unknown> {
  return { name: r.name ?? "", page_size: r.pageSize ?? 0, page_token: r.pageToken ?? "" };
}

interface WireOverrideLimit {
  rate?: number | null;
  period?: WireDuration | null;
  capacity?: number | null;
  max_reserved?: number | null;
}

export interface WireOverride {
  target?: {
    source: string;
    name: string;
    key: string;
    key_pattern: string;
    envoy_path?: { key: string; value: string }[];
  } | null;
  limit?: WireOverrideLimit | null;
  unlimited?: boolean;
  blocked?: boolean;
  expires_at?: WireTimestamp | null;
  reason: string;
  set_by: string;
  set_at?: WireTimestamp | null;
  expired: boolean;
  inert: boolean;
}

export function overrideOf(w: WireOverride): Override {
  const t = w.target;
  const target: OverrideTarget = { source: (t?.source ?? "LIMITS_FILE") as LimitSource, name: t?.name ?? "" };
  if (t?.key) target.key = t.key;
  if (t?.key_pattern) target.keyPattern = t.key_pattern;
  if (t?.envoy_path && t.envoy_path.length > 0) {
    target.envoyPath = t.envoy_path.map((e) => ({ key: e.key, value: e.value }));
  }
  const o: Override = {
    target,
    unlimited: Boolean(w.unlimited),
    blocked: Boolean(w.blocked),
    reason: w.reason ?? "",
    setBy: w.set_by ?? "",
    expired: Boolean(w.expired),
    inert: Boolean(w.inert),
  };
  if (present(w.limit)) {
    const l: OverrideLimit = {};
    if (present(w.limit.rate)) l.rate = Number(w.limit.rate);
    if (present(w.limit.period)) l.periodMs = msFromDuration(w.limit.period);
    if (present(w.limit.capacity)) l.capacity = Number(w.limit.capacity);
    if (present(w.limit.max_reserved)) l.maxReserved = Number(w.limit.max_reserved);
    o.limit = l;
  }
  if (present(w.expires_at)) o.expiresAt = dateFromTimestamp(w.expires_at);
  if (present(w.set_at)) o.setAt = dateFromTimestamp(w.set_at);
  return o;
}

export interface WireSetOverrideResponse {
  override?: WireOverride | null;
  replaced?: WireOverride | null;
}

export function setOverrideResult(w: WireSetOverrideResponse): SetOverrideResult {
  const r: SetOverrideResult = { override: overrideOf(w.override ?? ({} as WireOverride)) };
  if (present(w.replaced)) r.replaced = overrideOf(w.replaced);
  return r;
}

export interface WireListOverridesResponse {
  overrides: WireOverride[];
  next_page_token: string;
}

export function overridePage(w: WireListOverridesResponse): OverridePage {
  return { overrides: (w.overrides ?? []).map(overrideOf), nextPageToken: w.next_page_token ?? "" };
}

export interface WireListOverrideAuditResponse {
  entries: {
    sequence: string | number;
    at?: WireTimestamp | null;
    action: string;
    authorized_by: string;
    actor: string;
    peer: string;
    reason: string;
    before?: WireOverride | null;
    after?: WireOverride | null;
  }[];
  next_page_token: string;
}

export function overrideAuditPage(w: WireListOverrideAuditResponse): OverrideAuditPage {
  return {
    entries: (w.entries ?? []).map((e) => {
      const entry: OverrideAuditPage["entries"][number] = {
        sequence: Number(e.sequence),
        action: e.action ?? "",
        authorizedBy: e.authorized_by ?? "",
        actor: e.actor ?? "",
        peer: e.peer ?? "",
        reason: e.reason ?? "",
      };
      if (present(e.at)) entry.at = dateFromTimestamp(e.at);
      if (present(e.before)) entry.before = overrideOf(e.before);
      if (present(e.after)) entry.after = overrideOf(e.after);
      return entry;
    }),
    nextPageToken: w.next_page_token ?? "",
  };
}

// Concurrency leases.

export function wireAcquireRequest(request: AcquireRequest): Record<string, unknown> {
  const out: Record<string, unknown> = {
    limits: (request.limits ?? []).map(wireLimit),
    request_id: request.requestId ?? "",
    holder: request.holder ?? "",
  };
  if (present(request.ttlMs)) out.ttl = durationFromMs(checkLeaseTtlMs(request.ttlMs, "ttlMs"), "ttlMs");
  return out;
}

export function wireLeaseRef(ref: LeaseRef, ttlMs?: number): Record<string, unknown> {
  const out: Record<string, unknown> = { name: ref.name, key: ref.key, lease_id: ref.leaseId };
  if (present(ref.config)) out.config = wireConfig(ref.config, "config");
  if (present(ttlMs)) out.ttl = durationFromMs(checkLeaseTtlMs(ttlMs, "ttlMs"), "ttlMs");
  return out;
}

export function wireListLeasesRequest(request: ListLeasesRequest): Record<string, unknown> {
  // A config defines an inline limit: sent with source INLINE unless the caller says otherwise.
  const source = request.source ?? (present(request.config) ? "INLINE" : "LIMITS_FILE");
  const out: Record<string, unknown> = { name: request.name, key: request.key, source };
  if (present(request.config)) out.config = wireConfig(request.config, "config");
  if (present(request.pageSize)) out.page_size = request.pageSize;
  if (present(request.pageToken)) out.page_token = request.pageToken;
  return out;
}

export interface WireLease {
  id: string;
  name: string;
  key: string;
  source: string;
  count: string | number;
  acquired_at?: WireTimestamp | null;
  expires_at?: WireTimestamp | null;
  holder: string;
}

export interface WireAcquireResponse {
  allowed: boolean;
  lease?: WireLease | null;
  results: WireLimitResult[];
  retry_at?: WireTimestamp | null;
  retry_after?: WireDuration | null;
  reason: string;
  denied_by: number;
  replayed: boolean;
}

export interface WireLeaseStateResponse {
  state: string;
  held?: string | number;
  lease?: WireLease | null;
}

export interface WireListLeasesResponse {
  leases: WireLease[];
  held: string | number;
  capacity: string | number;
  next_page_token?: string;
}

/** The instant of a Timestamp in ms (not rounded: an expiry is not a time to wait for). */
function dateOf(t: WireTimestamp | null | undefined): Date {
  return present(t) ? new Date(Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6)) : new Date(0);
}

export function leaseInfo(w: WireLease): LeaseInfo {
  return {
    id: w.id,
    name: w.name,
    key: w.key,
    source: (w.source || "LIMITS_FILE") as LimitSource,
    count: Number(w.count ?? 0),
    acquiredAt: dateOf(w.acquired_at),
    expiresAt: dateOf(w.expires_at),
    holder: w.holder ?? "",
  };
}

export function acquireResult(w: WireAcquireResponse): AcquireResult {
  const r: AcquireResult = {
    allowed: Boolean(w.allowed),
    results: (w.results ?? []).map(limitResult),
    deniedBy: w.allowed ? -1 : Number(w.denied_by ?? -1),
    replayed: Boolean(w.replayed),
  };
  if (present(w.lease)) r.lease = leaseInfo(w.lease);
  if (present(w.retry_at)) r.retryAt = dateFromTimestamp(w.retry_at);
  if (present(w.retry_after)) r.retryAfterMs = msFromDuration(w.retry_after);
  const reason = reasonOf(w.reason);
  if (reason) r.reason = reason;
  return r;
}

function leaseState(s: string): LeaseState {
  return s === "HELD" || s === "RELEASED" ? s : "NOT_HELD";
}

export function releaseResult(w: WireLeaseStateResponse): ReleaseResult {
  return { state: leaseState(w.state), held: Number(w.held ?? 0) };
}

export function extendResult(w: WireLeaseStateResponse): ExtendResult {
  const r: ExtendResult = { state: leaseState(w.state) };
  if (present(w.lease)) r.lease = leaseInfo(w.lease);
  return r;
}

export function leaseList(w: WireListLeasesResponse): LeaseList {
  return {
    leases: (w.leases ?? []).map(leaseInfo),
    held: Number(w.held ?? 0),
    capacity: Number(w.capacity ?? 0),
    nextPageToken: w.next_page_token ?? "",
  };
}
