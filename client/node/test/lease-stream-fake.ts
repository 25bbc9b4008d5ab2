// The fake of the lease calls (lease-fake.ts) with a LeaseStream: each op is decided by the same
// fake as its call would be, and the results of a message are answered in one message, unless
// `holdResults` keeps them (in `heldResults`) until answer(), in the order a test chooses.
// `{ stream: false }`: a server without LeaseStream (it answers UNIMPLEMENTED). The ops of each
// message are recorded (`messages`), as is every method a client called (countingClient).
import * as grpc from "@grpc/grpc-js";

import { RateLimitClient, type ClientOptions } from "@ratelimit/client";

import { FakeLeases, type Wire } from "./lease-fake.js";

export const LEASE_STREAM = "/ratelimit.v1.RateLimitService/LeaseStream";

/** One op as the fake received it. */
export interface ReceivedOp {
  kind: "acquire" | "release" | "extend" | "none";
  id: string;
  request: Wire;
}

export class FakeLeaseStream extends FakeLeases {
  /** The ops of each message received, in order. */
  readonly messages: ReceivedOp[][] = [];
  /** How many LeaseStream calls were opened. */
  streams = 0;
  /** Keeps results (in `heldResults`) until answer(). */
  holdResults = false;
  readonly heldResults: Wire[] = [];
  private readonly open = new Set<grpc.ServerDuplexStream<Wire, Wire>>();
  private readonly halfClosed: grpc.ServerDuplexStream<Wire, Wire>[] = [];
  private readonly waiters: { ops: number; resolve: () => void }[] = [];
  private readonly closeWaiters: (() => void)[] = [];
  private readonly withStream: boolean;

  constructor(capacity: number, options: { stream?: boolean } = {}) {
    super(capacity);
    this.withStream = options.stream ?? true;
  }

  /** Every op received, across messages. */
  get ops(): ReceivedOp[] {
    return this.messages.flat();
  }

  /** Streams open now. */
  get openStreams(): number {
    return this.open.size;
  }

  /** Resolves once `n` ops in all have been received. */
  received(n: number): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.push({ ops: n, resolve });
      this.wake();
    });
  }

  /** Resolves once no stream is open. */
  allClosed(): Promise<void> {
    return new Promise((resolve) => {
      this.closeWaiters.push(resolve);
      this.wake();
    });
  }

  /**
   * Sends the held results in one message, in the order `order` gives them (default: as held),
   * and ends the streams the client half-closed meanwhile (as the server does, once it has
   * answered what it read).
   */
  answer(order: (held: Wire[]) => Wire[] = (h) => h): void {
    const results = order(this.heldResults.splice(0));
    for (const call of this.open) call.write({ results });
    for (const call of this.halfClosed.splice(0)) call.end();
  }

  /** Ends every open stream with `code` (after the results `answerFirst` gives, in one message). */
  endStreams(code: grpc.status, details: string, answerFirst = false): void {
    for (const call of this.open) {
      if (answerFirst && this.heldResults.length > 0) call.write({ results: this.heldResults.splice(0) });
      call.emit("error", { code, details });
    }
  }

  override async stop(): Promise<void> {
    for (const call of this.open) call.end();
    await super.stop();
  }

  protected override handlers(): grpc.UntypedServiceImplementation {
    const handlers = super.handlers();
    if (this.withStream) handlers.LeaseStream = (call: grpc.ServerDuplexStream<Wire, Wire>) => this.serve(call);
    return handlers;
  }

  private serve(call: grpc.ServerDuplexStream<Wire, Wire>): void {
    this.streams++;
    this.open.add(call);
    const closed = () => {
      this.open.delete(call);
      this.wake();
    };
    call.on("data", (m: Wire) => {
      const ops: ReceivedOp[] = m.ops.map((op: Wire) => {
        const kind = op.acquire ? "acquire" : op.release ? "release" : op.extend ? "extend" : "none";
        return { kind, id: String(op.id), request: op[kind] ?? {} };
      });
      this.messages.push(ops);
      const results = m.ops.map((op: Wire, i: number) => this.decide(op.id, ops[i]!));
      if (this.holdResults) this.heldResults.push(...results);
      else call.write({ results });
      this.wake();
    });
    call.on("end", () => {
      if (this.heldResults.length === 0) call.end();
      else this.halfClosed.push(call);
    });
    call.on("error", closed);
    call.on("cancelled", closed);
    call.on("finish", closed);
    call.on("close", closed);
  }

  private decide(id: unknown, op: ReceivedOp): Wire {
    if (op.kind === "none") return { id, code: grpc.status.INVALID_ARGUMENT, message: "op: one of acquire, release or extend is required" };
    const out = op.kind === "acquire" ? this.acquire(op.request) : op.kind === "release" ? this.release(op.request) : this.extend(op.request);
    if (typeof out === "number") return { id, code: out, message: "store unavailable" };
    return { id, code: 0, message: "", [op.kind]: out };
  }

  private wake(): void {
    const count = this.ops.length;
    for (const w of this.waiters.splice(0)) {
      if (count >= w.ops) w.resolve();
      else this.waiters.push(w);
    }
    if (this.open.size === 0) for (const resolve of this.closeWaiters.splice(0)) resolve();
  }
}

/**
 * A client whose every call's method is recorded in `methods` (the full path, e.g.
 * "/ratelimit.v1.RateLimitService/Acquire"), by a grpc-js interceptor.
 */
export function countingClient(target: string, options: ClientOptions = {}): { client: RateLimitClient; methods: string[] } {
  const methods: string[] = [];
  const interceptor: grpc.Interceptor = (callOptions, nextCall) => {
    methods.push(callOptions.method_definition.path);
    return new grpc.InterceptingCall(nextCall(callOptions));
  };
  const channelOptions = { ...options.channelOptions, interceptors: [interceptor] } as grpc.ChannelOptions;
  return { client: new RateLimitClient(target, { ...options, channelOptions }), methods };
}

/** How many times `methods` holds each method, by its short name ("Acquire", "LeaseStream"). */
export function tally(methods: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of methods) {
    const name = m.slice(m.lastIndexOf("/") + 1);
    out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}
