#!/usr/bin/env python3
"""Checks deploy/compose/compose.yaml: valid YAML, the four services, every mounted file present,
and the addresses the pieces use to reach each other consistent with the service names and the
server's flags; then checks the compose Prometheus configuration with promtool (with the alert
rules beside it, as they are mounted). No compose tool is needed (none is installed in CI).

Usage: check_compose.py COMPOSE_FILE PROMTOOL
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

errors = []


def require(cond, what):
    if not cond:
        errors.append(what)


def flag(args, name):
    for a in args:
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
    return None


def main():
    compose_file, promtool = sys.argv[1:3]
    base = os.path.dirname(os.path.abspath(compose_file))
    with open(compose_file) as f:
        doc = yaml.safe_load(f)
    services = doc.get("services", {})
    for name in ("ratelimit", "envoy", "prometheus", "otel-collector"):
        require(name in services, "service " + name)
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith(".") or src.startswith("/"):
                require(os.path.exists(os.path.join(base, src)),
                        "%s mounts %s, which exists" % (name, src))
    rl = services.get("ratelimit", {})
    require(rl.get("image") == "ratelimit-server:latest", "ratelimit image ratelimit-server:latest")
    args = rl.get("command", [])
    listen = flag(args, "listen") or ""
    require(listen.startswith("0.0.0.0:"), "ratelimit --listen on 0.0.0.0")
    require("--allow_insecure_listen" in args,
            "--allow_insecure_listen (plaintext off loopback refuses to start without it)")
    grpc_port = listen.rsplit(":", 1)[-1]
    metrics_port = (flag(args, "metrics_listen") or "").rsplit(":", 1)[-1]
    require(flag(args, "otel_endpoint") == "otel-collector:4317",
            "ratelimit sends traces to otel-collector:4317")

    # Envoy's ratelimit cluster reaches the service by name and gRPC port.
    with open(os.path.join(base, "../envoy/envoy.yaml")) as f:
        envoy = yaml.safe_load(f)
    clusters = {c["name"]: c for c in envoy["static_resources"]["clusters"]}
    for cluster, service in (("ratelimit", "ratelimit"), ("backend", "backend")):
        c = clusters.get(cluster)
        require(c is not None, "envoy cluster " + cluster)
        if c is None:
            continue
        addr = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"]
        require(addr["address"] in services, "envoy cluster %s targets a compose service" % cluster)
        if cluster == "ratelimit":
            require(str(addr["port_value"]) == grpc_port, "envoy reaches ratelimit's gRPC port")

    with open(os.path.join(base, "prometheus.yml")) as f:
        prom = yaml.safe_load(f)
    targets = [t for sc in prom["scrape_configs"] for s in sc["static_configs"] for t in s["targets"]]
    require("ratelimit:" + metrics_port in targets, "Prometheus scrapes ratelimit's metrics port")

    tmp = tempfile.mkdtemp()
    try:
        shutil.copy(os.path.join(base, "prometheus.yml"), tmp)
        shutil.copy(os.path.join(base, "../prometheus/ratelimit-alerts.yml"), tmp)
        r = subprocess.run([promtool, "check", "config", os.path.join(tmp, "prometheus.yml")],
                           capture_output=True, text=True)
        require(r.returncode == 0, "promtool check config: " + r.stdout + r.stderr)
    finally:
        shutil.rmtree(tmp)

    if errors:
        for e in errors:
            print("FAIL:", e)
        return 1
    print("OK", compose_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
