// An in-process fake of the lease calls (Acquire, Release, Extend, ListLeases) on port 0: a
// concurrency limit of `capacity` slots (the inline config's capacity when given) per (name,
// key), leases of the request's TTL (default 30 s) on the real clock; an Acquire repeating the
// requestId of a lease still held answers that lease again (replayed). `extendState` or
// `extendError` answers every Extend; `extendHang` leaves every Extend unanswered (until its
// deadline, or stop()); `acquireError` answers every Acquire. Calls are recorded, and each
// Extend's deadline as ms left when it arrived (`extendDeadlines`).
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const protoDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "proto");

export type Wire = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

interface FakeLease {
  id: string;
  name: string;
  key: string;
  count: number;
  holder: string;
  acquiredAt: number;
  expiresAt: number;
}

function ms(d: Wire | null | undefined): number | undefined {
  return d ? Number(d.seconds) * 1000 + (d.nanos ?? 0) / 1e6 : undefined;
}

function ts(at: number): Wire {
  return { seconds: Math.floor(at / 1000), nanos: Math.round((at % 1000) * 1e6) };
}

export class FakeLeases {
  capacity: number;
  extendState: string | undefined;
  extendError: grpc.status | undefined;
  extendHang = false;
  acquireError: grpc.status | undefined;
  readonly acquires: Wire[] = [];
  /** Each Acquire's deadline, as ms since the epoch (Infinity: none). */
  readonly acquireDeadlines: number[] = [];
  readonly extends: Wire[] = [];
  /** Each Extend's deadline, as ms left when it arrived. */
  readonly extendDeadlines: number[] = [];
  readonly releases: Wire[] = [];
  readonly listTokens: string[] = [];
  readonly lists: Wire[] = [];
  target = "";
  private readonly leases = new Map<string, FakeLease>();
  private readonly byRequest = new Map<string, string>();
  private readonly hung: (() => void)[] = [];
  /** Holds requests to the real server's 64 KiB. */
  private readonly server = new grpc.Server({ "grpc.max_receive_message_length": 64 * 1024 });

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  async start(): Promise<this> {
    const def = protoLoader.loadSync("ratelimit/v1/ratelimit.proto", { includeDirs: [protoDir], keepCase: true, enums: String });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      ratelimit: { v1: { RateLimitService: { service: grpc.ServiceDefinition } } };
    };
    this.server.addService(pkg.ratelimit.v1.RateLimitService.service, this.handlers());
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
    this.target = `127.0.0.1:${port}`;
    return this;
  }

  /** The service's methods (a subclass adds to them). */
  protected handlers(): grpc.UntypedServiceImplementation {
    const unary = (fn: (req: Wire, call: grpc.ServerUnaryCall<Wire, Wire>) => Wire | grpc.status) =>
      (call: grpc.ServerUnaryCall<Wire, Wire>, callback: grpc.sendUnaryData<Wire>) => {
        const out = fn(call.request, call);
        if (typeof out === "number") callback({ code: out, details: "store unavailable" } as grpc.ServiceError);
        else callback(null, out);
      };
    return {
      Acquire: unary((r, call) => {
        const d = call.getDeadline();
        this.acquireDeadlines.push(d instanceof Date ? d.getTime() : Number(d));
        return this.acquire(r);
      }),
      Release: unary((r) => this.release(r)),
      Extend: (call: grpc.ServerUnaryCall<Wire, Wire>, callback: grpc.sendUnaryData<Wire>) => {
        const d = call.getDeadline();
        this.extendDeadlines.push((d instanceof Date ? d.getTime() : Number(d)) - Date.now());
        if (this.extendHang) {
          this.extends.push(call.request);
          this.hung.push(() => callback({ code: grpc.status.UNAVAILABLE, details: "no answer" } as grpc.ServiceError));
          return;
        }
        unary((r) => this.extend(r))(call, callback);
      },
      ListLeases: unary((r, call) => {
        this.listTokens.push(...(call.metadata.get("authorization") as string[]));
        this.lists.push(r);
        // Pages of page_size (0: 100); this fake's token is the next page's first index.
        const held = this.list(r.name, r.key);
        const start = Number(r.page_token || 0);
        const end = start + (Number(r.page_size) || 100);
        return {
          leases: held.slice(start, end).map((l) => this.wire(l)),
          held: this.held(r.name, r.key),
          capacity: this.capacity,
          next_page_token: end < held.length ? String(end) : "",
        };
      }),
    };
  }

  stop(): Promise<void> {
    for (const answer of this.hung.splice(0)) answer();
    return new Promise((resolve) => this.server.tryShutdown(() => resolve()));
  }

  /** Moves a held lease's expiry to `ms` from now (what is left of an older lease). */
  expireIn(leaseId: string, ms: number): void {
    this.leases.get(leaseId)!.expiresAt = Date.now() + ms;
  }

  private list(name: string, key: string): FakeLease[] {
    const now = Date.now();
    for (const [id, l] of this.leases) if (l.expiresAt <= now) this.leases.delete(id);
    return [...this.leases.values()].filter((l) => l.name === name && l.key === key);
  }

  /** Slots held now on (name, key). */
  held(name: string, key: string): number {
    return this.list(name, key).reduce((n, l) => n + l.count, 0);
  }

  private wire(l: FakeLease): Wire {
    return { id: l.id, name: l.name, key: l.key, count: l.count, holder: l.holder, acquired_at: ts(l.acquiredAt), expires_at: ts(l.expiresAt) };
  }

  protected acquire(r: Wire): Wire | grpc.status {
    this.acquires.push(r);
    if (this.acquireError !== undefined) return this.acquireError;
    const limit = r.limits[0];
    const earlier = r.request_id ? this.byRequest.get(r.request_id) : undefined;
    const replayed = this.list(limit.name, limit.key).find((l) => l.id === earlier);
    if (replayed) return { allowed: true, lease: this.wire(replayed), results: [], denied_by: -1, replayed: true };
    const capacity = limit.config?.capacity ?? this.capacity;
    const count = limit.count ?? 1;
    const held = this.held(limit.name, limit.key);
    const now = Date.now();
    const result: Wire = { name: limit.name, key: limit.key, capacity };
    if (held + count > capacity) {
      const soonest = Math.min(...this.list(limit.name, limit.key).map((l) => l.expiresAt), now + 3_600_000);
      return {
        allowed: false, results: [{ ...result, value: capacity - held, reason: "NO_FREE_SLOTS" }],
        retry_at: ts(soonest), retry_after: ts(soonest - now), reason: "NO_FREE_SLOTS", denied_by: 0,
      };
    }
    const lease: FakeLease = {
      id: randomBytes(16).toString("hex"), name: limit.name, key: limit.key, count, holder: r.holder ?? "",
      acquiredAt: now, expiresAt: now + (ms(r.ttl) ?? 30_000),
    };
    this.leases.set(lease.id, lease);
    if (r.request_id) this.byRequest.set(r.request_id, lease.id);
    return { allowed: true, lease: this.wire(lease), results: [{ ...result, allowed: true, value: capacity - held - count }], denied_by: -1 };
  }

  protected release(r: Wire): Wire {
    this.releases.push(r);
    this.list(r.name, r.key);
    const state = this.leases.delete(r.lease_id) ? "RELEASED" : "NOT_HELD";
    return { state, held: this.held(r.name, r.key) };
  }

  protected extend(r: Wire): Wire | grpc.status {
    this.extends.push(r);
    if (this.extendError !== undefined) return this.extendError;
    if (this.extendState !== undefined) return { state: this.extendState };
    this.list(r.name, r.key);
    const lease = this.leases.get(r.lease_id);
    if (!lease) return { state: "NOT_HELD" };
    lease.expiresAt = Date.now() + (ms(r.ttl) ?? 30_000);
    return { state: "HELD", lease: this.wire(lease) };
  }
}
