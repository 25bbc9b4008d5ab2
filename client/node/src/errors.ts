import { Metadata, status, type ServiceError } from "@grpc/grpc-js";

/** The gRPC status code names, by number. */
const CODE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(status)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as number, k]),
);

// A server message that starts with the field it is about: `limits[0].key: must not be empty`,
// `settlements[1].receipt: ...`, `name: ...`.
const FIELD_PREFIX = /^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)*): /;

/**
 * A call that failed: the gRPC status code (a number of `status` from @grpc/grpc-js, and its
 * name), the server's message, and the request field the server named, when it named one.
 */
export class RateLimitError extends Error {
  /** The gRPC status code, e.g. 3 (status.INVALID_ARGUMENT). */
  readonly code: status;
  /** The code's name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** The server's message, e.g. "limits[0].key: must not be empty". */
  readonly details: string;
  /** The field the message names, e.g. "limits[0].key"; undefined when it names none. */
  readonly field: string | undefined;
  /** The response trailers, when the error came from the server. */
  readonly metadata: Metadata | undefined;

  constructor(code: status, details: string, options?: { cause?: unknown; metadata?: Metadata }) {
    const codeName = CODE_NAMES[code] ?? `CODE_${code}`;
    super(`${codeName}: ${details}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "RateLimitError";
    this.code = code;
    this.codeName = codeName;
    this.details = details;
    this.field = FIELD_PREFIX.exec(details)?.[1];
    this.metadata = options?.metadata;
  }

  /** Whether the service could not be reached or did not answer in time. */
  get unavailable(): boolean {
    return this.code === status.UNAVAILABLE || this.code === status.DEADLINE_EXCEEDED;
  }

  /** Wraps a grpc-js ServiceError. */
  static fromServiceError(e: ServiceError): RateLimitError {
    return new RateLimitError(e.code ?? status.UNKNOWN, e.details ?? e.message, {
      cause: e,
      metadata: e.metadata,
    });
  }
}
