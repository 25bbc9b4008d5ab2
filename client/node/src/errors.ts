import { Metadata, status, type ServiceError } from "@grpc/grpc-js";

/** The gRPC status code names, by number. */
const CODE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(status)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as number, k]),
);

// A server message that starts with the field it is about: `limits[0].key: must not be empty`,
// `settlements[1].receipt: ...`, `name: ...`. Field paths are proto field names (lower case),
// joined by dots, with an index in brackets.
const FIELD_PREFIX = /^([a-z_][a-z0-9_]*(?:\[\d+\])*(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])*)*): /;

// The codes the server answers a bad field with. Other codes' messages are not about a field,
// even when they start alike (UNAVAILABLE "redis: slot 5 is not served by any primary"), and
// grpc-js's own messages (INTERNAL "Request message serialization failure: ...") are not the
// server's at all.
const FIELD_CODES: ReadonlySet<number> = new Set([
  status.INVALID_ARGUMENT,
  status.NOT_FOUND,
  status.FAILED_PRECONDITION,
  status.ALREADY_EXISTS,
  status.PERMISSION_DENIED,
]);

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
  /**
   * The request field the message names, e.g. "limits[0].key"; undefined when it names none. Set
   * only for the codes the server answers a bad field with (INVALID_ARGUMENT, NOT_FOUND,
   * FAILED_PRECONDITION, ALREADY_EXISTS, PERMISSION_DENIED), and only when the message starts
   * with a field path ("limits[0].key: "), so that no other message passes for one.
   */
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
    this.field = FIELD_CODES.has(code) ? FIELD_PREFIX.exec(details)?.[1] : undefined;
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
