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
export {
  rateLimit,
  type NextFunction,
  type RateLimitInfo,
  type RateLimitMiddlewareOptions,
  type RequestLike,
  type ResolvedOptions,
  type ResponseLike,
} from "./express.js";
export type * from "./types.js";
export { status } from "@grpc/grpc-js";
