#!/usr/bin/env python3
"""Starts the real ratelimit-server with the arguments of a rendered kustomize overlay.

The container's args are taken from `kubectl kustomize OVERLAY`, with the mounted paths moved
into a temporary directory (a certificate made by openssl, used as server, client and CA; the
admin token; the limits ConfigMap's file) and every port set to 0. The server must start, serve
mTLS on --listen (the CLI with a client certificate sees the ConfigMap's limit) and plaintext on
--plaintext_listen (the port the kubelet's gRPC probes use).

Usage: kubernetes_args_test.py KUBECTL OVERLAY SERVER CLI OPENSSL
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

from server_process import ServerProcess

DEADLINE_S = 30


def main():
    kubectl, overlay, server, cli, openssl = sys.argv[1:6]
    rendered = subprocess.run([kubectl, "kustomize", overlay], check=True, capture_output=True,
                              text=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    workload = next(d for d in docs if d["kind"] in ("StatefulSet", "Deployment"))
    pod = workload["spec"]["template"]["spec"]
    container = pod["containers"][0]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in pod["volumes"]}

    work = tempfile.mkdtemp(prefix="kubernetes_args_")
    proc = None
    try:
        # Every mount becomes a directory under `work`; the ConfigMap's files are written there.
        remap = {}
        for m in container["volumeMounts"]:
            local = os.path.join(work, m["name"])
            os.makedirs(local, exist_ok=True)
            remap[m["mountPath"]] = local
            cm = (volumes.get(m["name"], {}).get("configMap") or {}).get("name")
            for name, text in (configmaps.get(cm, {}).get("data") or {}).items():
                with open(os.path.join(local, name), "w") as f:
                    f.write(text)

        def local_path(path):
            for mount, local in remap.items():
                if path == mount or path.startswith(mount + "/"):
                    return local + path[len(mount):]
            raise AssertionError("path %s is not in a mounted volume" % path)

        args = []
        files = {}
        for a in container["args"]:
            m = re.match(r"--(\w+)=(.*)", a)
            if m and m.group(2).startswith("/"):
                files[m.group(1)] = local_path(m.group(2))
                a = "--%s=%s" % (m.group(1), files[m.group(1)])
            elif m and re.match(r".*:\d+$", m.group(2)):
                a = "--%s=%s:0" % (m.group(1), m.group(2).rsplit(":", 1)[0])
            args.append(a)

        key, cert = files["tls_key_file"], files["tls_cert_file"]
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                        "-out", cert, "-subj", "/CN=ratelimit", "-addext",
                        "subjectAltName=DNS:ratelimit", "-days", "1"],
                       check=True, capture_output=True)
        shutil.copy(cert, files["tls_client_ca_file"])
        with open(files["admin_token_file"], "w") as f:
            f.write("an-admin-token-for-the-test-0123456789\n")
        os.chmod(files["admin_token_file"], 0o600)

        proc = ServerProcess(server, args, work)
        proc.wait_for_port(DEADLINE_S)  # fails if the server refuses the overlay's args
        deadline = time.monotonic() + DEADLINE_S
        listening = None
        while listening is None and time.monotonic() < deadline:
            for line in open(proc.log_path):
                if line.startswith("{") and json.loads(line).get("msg") == "listening":
                    listening = json.loads(line)
            time.sleep(0.05)
        if listening is None:
            raise AssertionError("no 'listening' log line")
        if listening.get("tls") != "mtls":
            raise AssertionError("--listen is not mTLS: %s" % listening)
        if not listening.get("plaintext_port"):
            raise AssertionError("no plaintext probe port: %s" % listening)

        def check(extra, port):
            return subprocess.run([cli, "check", "--target=127.0.0.1:%s" % port, "--name=api",
                                   "--key=k"] + extra, capture_output=True, text=True, timeout=10)

        tls = check(["--tls_ca_file=" + cert, "--tls_cert_file=" + cert, "--tls_key_file=" + key,
                     "--tls_server_name=ratelimit"], listening["port"])
        if tls.returncode != 0 or "api/k" not in tls.stdout:
            raise AssertionError("mTLS call failed: %s %s" % (tls.stdout, tls.stderr))
        clear = check([], listening["port"])
        if clear.returncode == 0:
            raise AssertionError("a plaintext call to the TLS port succeeded")
        probe = check([], listening["plaintext_port"])
        if probe.returncode != 0 or "api/k" not in probe.stdout:
            raise AssertionError("plaintext probe port failed: %s %s" % (probe.stdout,
                                                                          probe.stderr))
        print("OK: %s's args start the server (mTLS port, plaintext probe port)" % overlay)
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
