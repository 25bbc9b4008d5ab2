// The options of RateLimitClient and of its calls.
import type { ChannelCredentials, ChannelOptions } from "@grpc/grpc-js";

import type { ErrorLogger } from "./throttled-log.js";

/** TLS towards the server. Files are read once, when the client is created. */
export interface TlsOptions {
  /** PEM CA bundle that verifies the server (or `ca`). Neither: the default roots. */
  caFile?: string;
  ca?: string | Buffer;
  /** PEM client certificate chain and private key, for servers that require mTLS. */
  certFile?: string;
  cert?: string | Buffer;
  keyFile?: string;
  key?: string | Buffer;
  /** The name the server certificate must carry, when the target is an address. */
  serverName?: string;
}

export interface ClientOptions {
  /** Deadline of each call, in ms. Default DEFAULT_TIMEOUT_MS (1000). */
  timeoutMs?: number;
  /** TLS: `true` for the default roots, or the files to use. Default: plaintext. */
  tls?: boolean | TlsOptions;
  /** Channel credentials built by the caller; overrides `tls`. */
  credentials?: ChannelCredentials;
  /** The admin bearer token, sent with Reset and the override calls only. */
  adminToken?: string;
  /** A file whose first line is the admin token (read once, here). */
  adminTokenFile?: string;
  /**
   * Check only: how many more times a call answered UNAVAILABLE is tried. Default 2. Consume,
   * Reserve, Settle, Reset and the override calls are never retried: they change state, and a lost answer does not
   * mean nothing was taken (use `requestId` to make retrying a Consume or Reserve safe).
   */
  checkRetries?: number;
  /** First pause between Check attempts, doubled after each. Default 50 ms. */
  retryBackoffMs?: number;
  /**
   * Sends acquire, release and extend (and so the leases' heartbeats and the middleware's
   * inFlight slots) as ops on one LeaseStream of this client, opened at the first op, instead
   * of a call each: the same answers and errors, a sixth of the server's CPU per op. Ops queued
   * in the same turn of the event loop go out in one message. Leases do not belong to the
   * stream (they outlive it). A server without LeaseStream (UNIMPLEMENTED) makes the client
   * send calls for the rest of its life, logged once to `logger`. Default false.
   */
  leaseStream?: boolean;
  /** Where the client logs (the lease stream's fallback to calls). Default: console. */
  logger?: ErrorLogger;
  /** Extra gRPC channel options. */
  channelOptions?: ChannelOptions;
}

/** Per-call options. */
export interface CallOptions {
  /** This call's deadline, in ms (overrides the client's). */
  timeoutMs?: number;
  /** Cancels the call; the promise then rejects with `signal.reason`. */
  signal?: AbortSignal;
}

export interface ReserveAndWaitOptions extends CallOptions {
  /** How to wait (default: sleepUntil, on the real clock). */
  sleepUntil?: (when: Date, signal?: AbortSignal) => Promise<void>;
}
