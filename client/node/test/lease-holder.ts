// A program whose only work is to hold a lease until it is lost (lease.test.ts runs it against
// the fake, whose target is argv[2]): nothing but the lease keeps it running. It prints
// "holding", then "lost: <reason>" once the lease is lost, and exits when withLease returns.
import { RateLimitClient } from "@ratelimit/client";

const client = new RateLimitClient(process.argv[2]!);
await client.withLease({ limits: [{ name: "jobs", key: "k" }], ttlMs: 3000, heartbeatMs: 50 }, async (lease) => {
  console.log("holding");
  await new Promise((resolve) => lease.signal.addEventListener("abort", resolve, { once: true }));
  console.log(`lost: ${String(lease.signal.reason)}`);
});
client.close();
