// Runs the compiled tests (dist-test/*.test.js) with node's built-in test runner, one file at a
// time where this node supports choosing (each file starts its own servers; running them one by
// one keeps a small machine from being swamped). Extra arguments are passed to node --test
// (e.g. a file name).
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const files = args.length > 0 ? args : readdirSync(join(root, "dist-test"))
  .filter((f) => f.endsWith(".test.js"))
  .sort()
  .map((f) => join("dist-test", f));
const [major, minor] = process.versions.node.split(".").map(Number);
const atLeast = (a, b) => major > a || (major === a && minor >= b);
const flags = ["--test"];
// --test-concurrency: node 20.10; --test-timeout: node 20.11 (older nodes run files one by one).
if (atLeast(20, 10)) flags.push("--test-concurrency=1");
if (atLeast(20, 11)) flags.push("--test-timeout=120000");
const r = spawnSync(process.execPath, [...flags, ...files], { cwd: root, stdio: "inherit" });
process.exit(r.status ?? 1);
