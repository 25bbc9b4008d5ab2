// A program that takes a lease without a heartbeat (heartbeatMs 0) of a minute's TTL and then
// has nothing left to do (lease.test.ts runs it against the fake, whose target is argv[2]): the
// timer that marks the lease lost at its expiry must not keep it running. It prints "holding"
// and exits at once, leaving the lease to expire at the server.
import { RateLimitClient } from "@ratelimit/client";

const client = new RateLimitClient(process.argv[2]!);
const lease = await client.lease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 60_000, heartbeatMs: 0 });
console.log(lease.lost ? "lost" : "holding");
client.close();
