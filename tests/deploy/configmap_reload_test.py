#!/usr/bin/env python3
"""Hot reload of a limits file mounted from a Kubernetes ConfigMap.

The kubelet mounts a ConfigMap as a directory:
  <dir>/..2026_01_01_00_00_00.000000001/limits.yaml   the real file, in a timestamped dir
  <dir>/..data -> ..2026_01_01_00_00_00.000000001
  <dir>/limits.yaml -> ..data/limits.yaml
and publishes an update by writing a new timestamped dir, renaming a new symlink over ..data (one
atomic step) and deleting the old dir. The file the server watches (<dir>/limits.yaml) is never
written, renamed or deleted itself. This test starts ratelimit-server with
--limits_file=<dir>/limits.yaml, swaps ..data twice that way, and waits until the `ratelimit` CLI
sees each new capacity.

Usage: configmap_reload_test.py SERVER_BINARY CLI_BINARY
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from server_process import ServerProcess

DEADLINE_S = 30


def limits(capacity):
    return ("limits:\n  - name: api\n    kind: token_bucket\n    rate: 1\n    period: 1h\n"
            "    capacity: %d\n" % capacity)


def publish(mount, version, capacity):
    """Does what the kubelet's atomic writer does for one ConfigMap version."""
    ts_dir = "..2026_01_01_00_00_%02d.00000000%d" % (version, version)
    os.mkdir(os.path.join(mount, ts_dir))
    with open(os.path.join(mount, ts_dir, "limits.yaml"), "w") as f:
        f.write(limits(capacity))
    data = os.path.join(mount, "..data")
    old = os.readlink(data) if os.path.islink(data) else None
    tmp_link = os.path.join(mount, "..data_tmp")
    os.symlink(ts_dir, tmp_link)
    os.rename(tmp_link, data)  # the atomic swap
    user_link = os.path.join(mount, "limits.yaml")
    if not os.path.islink(user_link):
        os.symlink(os.path.join("..data", "limits.yaml"), user_link)
    if old:
        shutil.rmtree(os.path.join(mount, old))


def cli_capacity(cli, port):
    r = subprocess.run([cli, "check", "--target=127.0.0.1:%d" % port, "--name=api", "--key=k"],
                       capture_output=True, text=True, timeout=10)
    # "  api/k  allowed  value=5 of 5"
    for line in r.stdout.splitlines():
        if " of " in line and "api/k" in line:
            return int(line.rsplit(" of ", 1)[1].split()[0])
    return None


def wait_for(what, fn, expected):
    deadline = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last == expected:
            return
        time.sleep(0.05)
    raise AssertionError("%s: expected %r within %ds, last saw %r" % (what, expected, DEADLINE_S,
                                                                       last))


def main():
    server, cli = sys.argv[1:3]
    work = tempfile.mkdtemp(prefix="configmap_reload_")
    proc = None
    try:
        mount = os.path.join(work, "limits")
        os.mkdir(mount)
        publish(mount, 1, 5)
        proc = ServerProcess(server, [
            "--listen=127.0.0.1:0", "--data_dir=" + os.path.join(work, "data"),
            "--metrics_listen=", "--limits_file=" + os.path.join(mount, "limits.yaml"),
            "--limits_reload_interval=100ms"], work)
        p = proc.wait_for_port(DEADLINE_S)
        wait_for("capacity before the swap", lambda: cli_capacity(cli, p), 5)
        publish(mount, 2, 7)
        wait_for("capacity after the first ..data swap", lambda: cli_capacity(cli, p), 7)
        publish(mount, 3, 9)
        wait_for("capacity after the second ..data swap", lambda: cli_capacity(cli, p), 9)
        print("OK: the server followed both ConfigMap swaps")
        return 0
    except AssertionError as e:
        print("FAIL:", e)
        if proc is not None:
            proc.print_log_tail()
        return 1
    finally:
        if proc is not None:
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
