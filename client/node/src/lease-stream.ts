// Acquire, Release and Extend sent as ops on one LeaseStream of the client (ClientOptions
// .leaseStream) instead of a call each: docs/leases.md, "Lease streams". Each op settles as its
// call would: the answer the call would have resolved to (converted by the caller, as a call's),
// or the RateLimitError the call would have rejected with.
import { Metadata, status, type Client, type ClientDuplexStream, type MethodDefinition, type ServiceError, type StatusObject } from "@grpc/grpc-js";

import { checkTimeoutMs } from "./convert.js";
import { RateLimitError } from "./errors.js";
import type { CallOptions } from "./options.js";
import type { ErrorLogger } from "./throttled-log.js";
import { illFormedError, illFormedField } from "./validate.js";

/** The calls a lease stream carries. */
export type LeaseMethod = "Acquire" | "Release" | "Extend";

/** The field of LeaseOp (and of LeaseOpResult) of each call. */
const KIND = { Acquire: "acquire", Release: "release", Extend: "extend" } as const;

/** The most ops in one LeaseStreamRequest (the server's bound). */
export const MAX_OPS_PER_MESSAGE = 1000;
/** The largest LeaseStreamRequest, in bytes (the server's bound on every request: 64 KiB). */
export const MAX_MESSAGE_BYTES = 64 * 1024;
/**
 * A stream with no op waiting for this long (ms) is closed (half-closed: the server ends it), so
 * that it keeps no program running; the next op opens another.
 */
export const LEASE_STREAM_IDLE_MS = 1000;

const PATH = "/ratelimit.v1.RateLimitService/LeaseStream";

/** Sends one op as the call it stands for (the fallback, and ops a stream cannot carry). */
export type UnaryLeaseCall = (method: LeaseMethod, request: unknown, options: CallOptions | undefined) => Promise<unknown>;

interface WireOpResult {
  id: string | number;
  code: number;
  message: string;
  acquire?: unknown;
  release?: unknown;
  extend?: unknown;
}

interface WireStreamResponse {
  results?: WireOpResult[] | null;
}

/** One op waiting for its result. */
interface Op {
  readonly id: number;
  readonly method: LeaseMethod;
  readonly request: unknown;
  readonly options: CallOptions | undefined;
  /** The LeaseStreamRequest of this op alone: messages are these, concatenated. */
  readonly bytes: Buffer;
  /** When it was issued, and its deadline (Date.now() ms). */
  readonly issuedAt: number;
  readonly deadline: number;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  timer?: NodeJS.Timeout;
  onAbort?: () => void;
  /** Settled (answered, timed out, aborted or handed to a call): a late result is discarded. */
  done: boolean;
}

/** One LeaseStream call and the ops sent or to be sent on it. */
interface Session {
  readonly call: ClientDuplexStream<Buffer, WireStreamResponse>;
  /** Ops written, by id, waiting for their results. */
  readonly sent: Map<string, Op>;
  /** Ops not written yet (the next message's), in order; settled ones are skipped. */
  queue: Op[];
  /** Ops issued on this stream and not settled. */
  waiting: number;
  /** A result came: the server has LeaseStream. */
  answered: boolean;
  flushScheduled: boolean;
  /** The last write filled the stream's buffer: the next waits for 'drain'. */
  blocked: boolean;
  /** Half-closed (by close(), or idle): no new op; cancelled once nothing waits. */
  closing: boolean;
  /** The server's status came: nothing more is written. */
  finished: boolean;
  ended: boolean;
  idleTimer?: NodeJS.Timeout;
}

/** A status error as grpc-js makes one (the `cause` of the call's RateLimitError). */
function serviceError(code: status, details: string, metadata: Metadata = new Metadata()): ServiceError {
  return Object.assign(new Error(`${code} ${status[code]}: ${details}`), { code, details, metadata });
}

/** The error the call would have rejected with, for a status. */
function callError(code: status, details: string): RateLimitError {
  return RateLimitError.fromServiceError(serviceError(code, details));
}

/**
 * The lease stream of one client: one LeaseStream call at a time, opened at the first op and
 * shared by every caller; ops are told apart by an id counted by this client.
 */
export class LeaseStream {
  private session: Session | undefined;
  private nextId = 1;
  /** The server answered UNIMPLEMENTED: every op is a call, for the client's life. */
  private unsupported = false;
  private closed = false;
  private readonly serialize: (value: unknown) => Buffer;
  private readonly deserialize: (bytes: Buffer) => WireStreamResponse;

  constructor(
    private readonly stub: Client,
    method: MethodDefinition<unknown, unknown>,
    private readonly unary: UnaryLeaseCall,
    private readonly timeoutMs: number,
    private readonly logger: ErrorLogger,
  ) {
    this.serialize = method.requestSerialize;
    this.deserialize = method.responseDeserialize as (bytes: Buffer) => WireStreamResponse;
  }

  /** Sends the op; resolves to the call's wire answer, or rejects as the call would. */
  send(method: LeaseMethod, request: unknown, options: CallOptions | undefined): Promise<unknown> {
    if (this.unsupported || this.closed) return this.unary(method, request, options);
    // The checks of a call, in its order, with its errors.
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const illFormed = illFormedField(request);
    if (illFormed !== undefined) return Promise.reject(illFormedError(illFormed));
    let timeoutMs: number;
    try {
      timeoutMs = checkTimeoutMs(options?.timeoutMs ?? this.timeoutMs, "timeoutMs");
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.nextId++;
    let bytes: Buffer;
    try {
      bytes = this.serialize({ ops: [{ id, [KIND[method]]: request }] });
    } catch {
      // The call fails to serialize it too, and rejects with grpc-js's own error.
      return this.unary(method, request, options);
    }
    // An op that fills a message on its own: as a call, the server refuses it as it refuses the
    // call (a message past the bound would end the stream, failing every op on it).
    if (bytes.length > MAX_MESSAGE_BYTES) return this.unary(method, request, options);
    return new Promise<unknown>((resolve, reject) => {
      const issuedAt = Date.now();
      const op: Op = {
        id, method, request, options, bytes, issuedAt, deadline: issuedAt + timeoutMs, resolve, reject, done: false,
      };
      const session = this.session ?? this.open();
      op.timer = setTimeout(() => this.timedOut(session, op), timeoutMs);
      if (signal) {
        op.onAbort = () => this.settle(session, op, undefined, signal.reason);
        signal.addEventListener("abort", op.onAbort, { once: true });
      }
      session.queue.push(op);
      session.waiting++;
      clearTimeout(session.idleTimer);
      session.idleTimer = undefined;
      if (!session.flushScheduled && !session.blocked) {
        session.flushScheduled = true;
        setImmediate(() => {
          session.flushScheduled = false;
          this.flush(session);
        });
      }
    });
  }

  /**
   * Ends the stream: what was issued is sent, the stream half-closed so that the server answers
   * it, and cancelled once nothing waits (at once when nothing does). Later ops are calls.
   */
  close(): void {
    this.closed = true;
    const session = this.session;
    if (!session) return;
    this.session = undefined;
    clearTimeout(session.idleTimer);
    this.flush(session, true);
    if (session.waiting === 0) {
      session.call.cancel();
      return;
    }
    session.closing = true;
    session.call.end();
  }

  private open(): Session {
    const call = this.stub.makeBidiStreamRequest<Buffer, WireStreamResponse>(
      PATH,
      (b: Buffer) => b,
      this.deserialize,
      new Metadata(),
      {},
    );
    const session: Session = {
      call, sent: new Map(), queue: [], waiting: 0, answered: false,
      flushScheduled: false, blocked: false, closing: false, finished: false, ended: false,
    };
    let error: ServiceError | undefined;
    let final: StatusObject | undefined;
    call.on("data", (m: WireStreamResponse) => this.received(session, m));
    call.on("error", (e: ServiceError) => {
      error = e;
    });
    // The status comes as the read side ends; results pushed before it may still be on their way
    // to 'data': the stream is done at 'end' (every result read), or soon after the status.
    const finish = () => this.ended(session, final!, error);
    call.on("status", (s: StatusObject) => {
      final = s;
      session.finished = true;
      if (this.session === session) this.session = undefined; // the next op opens another
      if (call.readableEnded) finish();
      else setImmediate(finish);
    });
    call.on("end", () => {
      if (final) finish();
    });
    this.session = session;
    return session;
  }

  /** Writes the queued ops, packed into messages of at most 1000 ops and 64 KiB. */
  private flush(session: Session, force = false): void {
    if (session.finished || (session.blocked && !force)) return;
    const queue = session.queue;
    let i = 0;
    while (i < queue.length) {
      const parts: Buffer[] = [];
      let bytes = 0;
      for (; i < queue.length && parts.length < MAX_OPS_PER_MESSAGE; i++) {
        const op = queue[i]!;
        if (op.done) continue;
        if (bytes + op.bytes.length > MAX_MESSAGE_BYTES) break;
        parts.push(op.bytes);
        bytes += op.bytes.length;
        session.sent.set(String(op.id), op);
      }
      if (parts.length === 0) continue;
      // A message is its ops' own LeaseStreamRequests, concatenated: repeated fields append.
      const room = session.call.write(parts.length === 1 ? parts[0]! : Buffer.concat(parts, bytes));
      if (!room && !force) {
        session.blocked = true;
        session.call.once("drain", () => {
          session.blocked = false;
          this.flush(session);
        });
        break;
      }
    }
    session.queue = queue.slice(i);
  }

  private received(session: Session, message: WireStreamResponse): void {
    session.answered = true;
    for (const r of message.results ?? []) {
      const key = String(r.id);
      const op = session.sent.get(key);
      if (!op) continue; // settled already (timed out, aborted): discarded
      session.sent.delete(key);
      if (r.code !== status.OK) {
        this.settle(session, op, undefined, callError(r.code, r.message ?? ""));
        continue;
      }
      const answer = r[KIND[op.method]];
      if (answer === undefined || answer === null) {
        this.settle(session, op, undefined, callError(status.INTERNAL, `lease stream: op ${key} answered OK without its ${KIND[op.method]} result`));
      } else {
        this.settle(session, op, answer);
      }
    }
  }

  private timedOut(session: Session, op: Op): void {
    session.sent.delete(String(op.id));
    const seconds = ((Date.now() - op.issuedAt) / 1000).toFixed(3);
    this.settle(session, op, undefined, callError(status.DEADLINE_EXCEEDED, `Deadline exceeded after ${seconds}s,waiting for the lease stream's answer`));
  }

  /** Detaches a settled op from its stream: no timer, no abort listener, not waited for. */
  private detach(session: Session, op: Op): boolean {
    if (op.done) return false;
    op.done = true;
    clearTimeout(op.timer);
    if (op.onAbort) op.options!.signal!.removeEventListener("abort", op.onAbort);
    session.waiting--;
    return true;
  }

  private settle(session: Session, op: Op, value: unknown, error?: unknown): void {
    if (!this.detach(session, op)) return;
    session.sent.delete(String(op.id));
    if (error !== undefined) op.reject(error);
    else op.resolve(value);
    if (session.waiting > 0 || session.ended) return;
    if (session.closing) {
      session.call.cancel();
    } else if (session === this.session && !session.idleTimer) {
      session.idleTimer = setTimeout(() => this.idle(session), LEASE_STREAM_IDLE_MS);
      session.idleTimer.unref();
    }
  }

  /** Nothing waited for LEASE_STREAM_IDLE_MS: the stream is half-closed; the next op opens another. */
  private idle(session: Session): void {
    session.idleTimer = undefined;
    if (session !== this.session || session.waiting > 0) return;
    this.session = undefined;
    session.closing = true;
    session.call.end();
    // A server that does not end it (hung) must not keep the stream open.
    setTimeout(() => session.ended || session.call.cancel(), LEASE_STREAM_IDLE_MS).unref();
  }

  /** The stream ended: its waiting ops fail as calls would on UNAVAILABLE, or become calls. */
  private ended(session: Session, final: StatusObject, error: ServiceError | undefined): void {
    if (session.ended) return;
    session.ended = true;
    clearTimeout(session.idleTimer);
    if (this.session === session) this.session = undefined;
    const ops = [...session.sent.values(), ...session.queue].filter((op) => !op.done);
    session.sent.clear();
    session.queue = [];
    if (final.code === status.UNIMPLEMENTED && !session.answered) {
      if (!this.unsupported) {
        this.unsupported = true;
        this.logger.error(
          `ratelimit client: the server does not implement LeaseStream (UNIMPLEMENTED: ${final.details}); ` +
            "acquire, release and extend are sent as calls from now on, for this client's life",
        );
      }
      // Not decided: each is sent again as its call, within what is left of its deadline.
      for (const op of ops) {
        this.detach(session, op);
        const timeoutMs = Math.max(1, op.deadline - Date.now());
        this.unary(op.method, op.request, { ...op.options, timeoutMs }).then(op.resolve, op.reject);
      }
      return;
    }
    const details = final.code === status.OK ? "the lease stream ended before answering" : final.details;
    for (const op of ops) {
      this.settle(session, op, undefined, new RateLimitError(status.UNAVAILABLE, details, {
        cause: error ?? serviceError(final.code, final.details, final.metadata),
        metadata: final.metadata,
      }));
    }
  }
}
