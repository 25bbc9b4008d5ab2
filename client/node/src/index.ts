export {
  DEFAULT_CHECK_RETRIES,
  DEFAULT_TIMEOUT_MS,
  RateLimitClient,
  sleepUntil,
  type CallOptions,
  type ClientOptions,
  type ReserveAndWaitOptions,
  type TlsOptions,
} from "./client.js";
export { RateLimitError } from "./errors.js";
export { HEARTBEAT_FRACTION, Lease, LeaseDeniedError, LeaseLostError, type LeaseRequest } from "./lease.js";
export {
  MAX_KEY_BYTES,
  rateLimit,
  type FailureMode,
  type NextFunction,
  type RateLimitInfo,
  type InFlightOption,
  type RateLimitMiddlewareBaseOptions,
  type RateLimitMiddlewareOptions,
  type RateLimitOption,
  type RequestLike,
  type ResolvedOptions,
  type ResponseLike,
} from "./express.js";
export { ERROR_LOG_INTERVAL_MS, ThrottledLog, type ErrorLogger } from "./throttled-log.js";
export type * from "./types.js";
export { status } from "@grpc/grpc-js";
