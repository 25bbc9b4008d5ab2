// Starts a real ratelimit-server for a test: port 0, a temp dir of its own, stopped by pid
// (SIGTERM, then SIGKILL after a deadline) whatever the test's outcome.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface ServerOptions {
  /** Contents of the limits file. */
  limits?: string;
  /** Admin token, written to a file given with --admin_token_file. */
  adminToken?: string;
  /** More flags. */
  args?: string[];
  /** The temp dir to use (default: a new one). */
  dir?: string;
}

export interface RunningServer {
  target: string;
  port: number;
  dir: string;
  process: ChildProcess;
  /** Stops the server (idempotent). */
  stop(): Promise<void>;
  /** Everything the server wrote on stderr so far. */
  log(): string;
}

export function serverBinary(): string {
  const bin = process.env.RATELIMIT_SERVER;
  if (!bin) {
    throw new Error(
      "RATELIMIT_SERVER is not set: point it at a built ratelimit-server " +
        "(e.g. RATELIMIT_SERVER=$PWD/build/bin/ratelimit-server)",
    );
  }
  if (!existsSync(bin)) throw new Error(`RATELIMIT_SERVER=${bin}: no such file`);
  return bin;
}

// Every directory tempDir made, removed when this test process exits (the servers in them are
// stopped by then: each test stops its own).
const made = new Set<string>();
process.on("exit", () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A new temporary directory, removed with everything in it when the test process exits. */
export function tempDir(prefix = "rl-node-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.add(dir);
  return dir;
}

/** Waits until `condition` holds, polling, for at most `timeoutMs`. */
export async function eventually(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  const bin = serverBinary();
  const dir = options.dir ?? tempDir();
  const portFile = join(dir, "port");
  rmSync(portFile, { force: true });
  const args = [
    "--listen=127.0.0.1:0",
    `--port_file=${portFile}`,
    `--data_dir=${join(dir, "data")}`,
    "--metrics_listen=",
    "--shutdown_grace=1s",
  ];
  if (options.limits !== undefined) {
    writeFileSync(join(dir, "limits.yaml"), options.limits);
    args.push(`--limits_file=${join(dir, "limits.yaml")}`);
  }
  if (options.adminToken !== undefined) {
    writeFileSync(join(dir, "token"), options.adminToken + "\n", { mode: 0o600 });
    args.push(`--admin_token_file=${join(dir, "token")}`);
  }
  args.push(...(options.args ?? []));
  const env = { ...process.env };
  delete env.RATELIMIT_ADMIN_TOKEN;
  const child = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"], env });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  let exited = false;
  const exitedPromise = new Promise<void>((resolve) => child.once("exit", () => {
    exited = true;
    resolve();
  }));
  const stop = async () => {
    if (exited) return;
    child.kill("SIGTERM");
    const timer = setTimeout(() => {
      if (!exited) child.kill("SIGKILL");
    }, 10_000);
    await exitedPromise;
    clearTimeout(timer);
  };
  try {
    await eventually(() => {
      if (exited) throw new Error(`ratelimit-server exited during start-up:\n${stderr}`);
      return existsSync(portFile) && readFileSync(portFile, "utf8").trim() !== "";
    }, 20_000, "the server's port file");
  } catch (e) {
    await stop();
    throw e;
  }
  const port = Number(readFileSync(portFile, "utf8").trim());
  return { target: `127.0.0.1:${port}`, port, dir, process: child, stop, log: () => stderr };
}

/**
 * A CA, a server certificate for 127.0.0.1 / "ratelimit.test" and a client certificate, made
 * with openssl.
 */
export function makeTlsFiles(dir: string): { ca: string; cert: string; key: string; clientCert: string; clientKey: string } {
  const f = (n: string) => join(dir, n);
  const run = (args: string[]) => execFileSync("openssl", args, { stdio: "pipe" });
  run(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f("ca.key"), "-out", f("ca.pem"),
    "-days", "2", "-subj", "/CN=ratelimit test CA"]);
  run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f("server.key"), "-out", f("server.csr"),
    "-subj", "/CN=ratelimit.test"]);
  writeFileSync(f("ext.cnf"), "subjectAltName=DNS:ratelimit.test,IP:127.0.0.1\n");
  run(["x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"),
    "-CAcreateserial", "-out", f("server.pem"), "-days", "2", "-extfile", f("ext.cnf")]);
  run(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f("client.key"), "-out", f("client.csr"),
    "-subj", "/CN=ratelimit test client"]);
  writeFileSync(f("client.cnf"), "extendedKeyUsage=clientAuth\n");
  run(["x509", "-req", "-in", f("client.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"),
    "-CAcreateserial", "-out", f("client.pem"), "-days", "2", "-extfile", f("client.cnf")]);
  return { ca: f("ca.pem"), cert: f("server.pem"), key: f("server.key"), clientCert: f("client.pem"), clientKey: f("client.key") };
}
