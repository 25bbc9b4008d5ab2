// Conversions between the typed API (types.ts) and the wire objects of @grpc/proto-loader
// (keepCase, longs as strings, enums as strings, bytes as Buffers).
import { RateLimitError } from "./errors.js";
import type {
  BatchResult,
  DenyReason,
  LimitRequest,
  LimitResult,
  RateLimitRequest,
  RateLimitResult,
  ResetRequest,
  SettleResult,
  Settlement,
} from "./types.js";

export interface WireDuration {
  seconds: string | number;
  nanos: number;
}
export type WireTimestamp = WireDuration;

/** Milliseconds (finite, fractions allowed) as a google.protobuf.Duration. */
export function durationFromMs(ms: number, field: string): WireDuration {
  if (typeof ms !== "number" || !Number.isFinite(ms)) {
    throw new TypeError(`${field}: must be a finite number of milliseconds, got ${String(ms)}`);
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
  const c = limit.config;
  if (present(c)) {
    const field = `limits[${i}].config`;
    const config: Record<string, unknown> = {
      kind: c.kind,
      rate: c.rate,
      period: durationFromMs(c.periodMs, `${field}.periodMs`),
    };
    if (present(c.capacity)) config.capacity = c.capacity;
    if (present(c.maxReserved)) config.max_reserved = c.maxReserved;
    if (present(c.startMs)) config.start = durationFromMs(c.startMs, `${field}.startMs`);
    if (present(c.jitter)) config.jitter = c.jitter;
    out.config = config;
  }
  return out;
}

export function wireRateLimitRequest(request: RateLimitRequest): Record<string, unknown> {
  return {
    limits: (request.limits ?? []).map(wireLimit),
    request_id: request.requestId ?? "",
    omit_receipts: request.omitReceipts ?? false,
  };
}

export function wireBatchRequest(
  entries: { method?: string; request: RateLimitRequest }[],
): Record<string, unknown> {
  return {
    entries: entries.map((e) => ({ method: e.method ?? "CONSUME", request: wireRateLimitRequest(e.request) })),
  };
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

function reasonOf(r: unknown): DenyReason | undefined {
  if (r === "INSUFFICIENT_TOKENS" || r === "COUNT_EXCEEDS_CAPACITY" || r === "MAX_RESERVED_EXCEEDED") {
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
