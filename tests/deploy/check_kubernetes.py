#!/usr/bin/env python3
"""Renders a kustomize overlay of deploy/kubernetes and checks what an operator relies on.

Usage: check_kubernetes.py KUBECTL OVERLAY_DIR {rocksdb|redis}
Exits 1 naming every violated property.
"""
import subprocess
import sys

import yaml

errors = []


def require(cond, what):
    if not cond:
        errors.append(what)


def flag_value(args, name):
    prefix = "--" + name + "="
    for a in args:
        if a.startswith(prefix):
            return a[len(prefix):]
    return None


def check_security(pod_spec, container):
    psc = pod_spec.get("securityContext") or {}
    csc = container.get("securityContext") or {}
    require(psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True,
            "runAsNonRoot: true")
    require(csc.get("readOnlyRootFilesystem") is True, "container readOnlyRootFilesystem: true")
    require(csc.get("allowPrivilegeEscalation") is False,
            "container allowPrivilegeEscalation: false")
    require((csc.get("capabilities") or {}).get("drop") == ["ALL"],
            "container capabilities.drop: [ALL]")
    seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    require(seccomp == "RuntimeDefault", "seccompProfile RuntimeDefault")
    require(pod_spec.get("automountServiceAccountToken") is False,
            "automountServiceAccountToken: false")


def check_probes(container):
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    args = container.get("args", [])
    for probe in ("readinessProbe", "livenessProbe"):
        grpc = (container.get(probe) or {}).get("grpc")
        require(grpc is not None, probe + " is a native grpc probe")
        if grpc is None:
            continue
        port = grpc.get("port")
        # The kubelet's gRPC probe speaks plaintext: it must target the plaintext port, which the
        # server only opens on a non-loopback address with --allow_insecure_listen.
        plaintext = flag_value(args, "plaintext_listen")
        tls = flag_value(args, "tls_cert_file") is not None
        if tls:
            require(plaintext is not None and plaintext.endswith(":" + str(port)),
                    probe + " targets the --plaintext_listen port (the main port is TLS)")
            require(plaintext is not None and plaintext.startswith("0.0.0.0:"),
                    "--plaintext_listen on 0.0.0.0 (the kubelet probes the pod IP)")
            require("--allow_insecure_listen" in args,
                    "--allow_insecure_listen (needed for --plaintext_listen off loopback)")
        require(port in ports.values(), probe + " port is a declared containerPort")


def check_tls_and_admin(pod_spec, container):
    args = container.get("args", [])
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for flag in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = flag_value(args, flag)
        require(path is not None, "--" + flag + " is set")
        if path is None:
            continue
        found = [n for n, m in mounts.items() if path.startswith(m["mountPath"].rstrip("/") + "/")]
        require(found and "secret" in volumes.get(found[0], {}),
                "--" + flag + " " + path + " is in a mounted Secret")
    token = flag_value(args, "admin_token_file")
    require(token is not None, "--admin_token_file is set")
    if token:
        found = [n for n, m in mounts.items() if token.startswith(m["mountPath"].rstrip("/") + "/")]
        require(found and "secret" in volumes.get(found[0], {}),
                "--admin_token_file is in a mounted Secret")
    listen = flag_value(args, "listen") or ""
    require(listen.startswith("0.0.0.0:"), "--listen on 0.0.0.0")
    metrics = flag_value(args, "metrics_listen") or ""
    require(metrics.startswith("0.0.0.0:"), "--metrics_listen on 0.0.0.0 (scraped from outside)")


def check_limits_mount(pod_spec, container, configmaps):
    args = container.get("args", [])
    path = flag_value(args, "limits_file")
    require(path is not None, "--limits_file is set")
    if path is None:
        return
    directory, _, file_name = path.rpartition("/")
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == directory]
    require(len(mounts) == 1, "a volume is mounted at the directory of --limits_file " + directory)
    if len(mounts) != 1:
        return
    mount = mounts[0]
    # A subPath mount is never updated by the kubelet: hot reload would never see an edit.
    require("subPath" not in mount, "the limits ConfigMap is mounted without subPath")
    volume = next((v for v in pod_spec.get("volumes", []) if v["name"] == mount["name"]), {})
    cm_name = (volume.get("configMap") or {}).get("name")
    require(cm_name in configmaps, "the limits volume is a ConfigMap of the rendering")
    if cm_name in configmaps:
        data = configmaps[cm_name].get("data") or {}
        require(file_name in data, "the ConfigMap holds " + file_name)
        if file_name in data:
            require("limits" in (yaml.safe_load(data[file_name]) or {}),
                    "the ConfigMap's " + file_name + " is a limits file")


def check_resources(container):
    res = container.get("resources") or {}
    req = res.get("requests") or {}
    require("cpu" in req and "memory" in req, "resource requests for cpu and memory")
    require("memory" in (res.get("limits") or {}), "a memory limit")


def check_network_policy(docs, pod_labels, grpc_port, metrics_port):
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    require(len(policies) == 1, "one NetworkPolicy")
    if not policies:
        return
    spec = policies[0]["spec"]
    selector = spec.get("podSelector", {}).get("matchLabels", {})
    require(selector and all(pod_labels.get(k) == v for k, v in selector.items()),
            "the NetworkPolicy selects the pods")
    require("Ingress" in spec.get("policyTypes", []), "the NetworkPolicy restricts ingress")
    allowed = {}
    for rule in spec.get("ingress", []):
        require(rule.get("from"), "every ingress rule names its sources")
        for p in rule.get("ports", []):
            allowed.setdefault(p.get("port"), []).append(rule.get("from", []))
    require(set(allowed) == {grpc_port, metrics_port},
            "ingress only to the gRPC and metrics ports, got %s" % sorted(allowed, key=str))
    grpc_from = allowed.get(grpc_port, [[]])[0]
    require(any((f.get("podSelector") or {}).get("matchLabels") for f in grpc_from),
            "gRPC ingress only from labelled client pods")
    metrics_from = allowed.get(metrics_port, [[]])[0]
    require(any(((f.get("namespaceSelector") or {}).get("matchLabels") or {})
                .get("kubernetes.io/metadata.name") == "monitoring" for f in metrics_from),
            "metrics ingress only from the monitoring namespace")


def main():
    kubectl, overlay, flavour = sys.argv[1:4]
    rendered = subprocess.run([kubectl, "kustomize", overlay], check=True,
                              capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}

    workload_kind = "StatefulSet" if flavour == "rocksdb" else "Deployment"
    workloads = by_kind.get(workload_kind, [])
    require(len(workloads) == 1, "one " + workload_kind)
    other = "Deployment" if flavour == "rocksdb" else "StatefulSet"
    require(not by_kind.get(other), "no " + other)
    if not workloads:
        return report(overlay)
    wl = workloads[0]
    template = wl["spec"]["template"]
    pod_spec = template["spec"]
    pod_labels = template["metadata"].get("labels", {})
    containers = pod_spec["containers"]
    require(len(containers) == 1, "one container")
    c = containers[0]
    require(c.get("image") == "ratelimit-server:latest", "image ratelimit-server:latest")
    args = c.get("args", [])
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}

    check_security(pod_spec, c)
    check_probes(c)
    check_tls_and_admin(pod_spec, c)
    check_limits_mount(pod_spec, c, configmaps)
    check_resources(c)

    annotations = template["metadata"].get("annotations", {})
    require(annotations.get("prometheus.io/scrape") == "true", "prometheus.io/scrape on the pods")
    require(annotations.get("prometheus.io/port") == str(ports.get("metrics")),
            "prometheus.io/port is the metrics port")

    services = by_kind.get("Service", [])
    require(len(services) == 1, "one Service")
    if services:
        svc = services[0]["spec"]
        require(all(pod_labels.get(k) == v for k, v in svc.get("selector", {}).items())
                and svc.get("selector"), "the Service selects the pods")
        svc_ports = {p["name"]: p for p in svc.get("ports", [])}
        require(set(svc_ports) == {"grpc", "metrics"}, "the Service exposes grpc and metrics only")

    pdbs = by_kind.get("PodDisruptionBudget", [])
    require(len(pdbs) == 1, "one PodDisruptionBudget")
    if pdbs:
        sel = pdbs[0]["spec"].get("selector", {}).get("matchLabels", {})
        require(sel and all(pod_labels.get(k) == v for k, v in sel.items()),
                "the PodDisruptionBudget selects the pods")
        require("maxUnavailable" in pdbs[0]["spec"] or "minAvailable" in pdbs[0]["spec"],
                "the PodDisruptionBudget sets a budget")

    check_network_policy(docs, pod_labels, ports.get("grpc"), ports.get("metrics"))

    if flavour == "rocksdb":
        spec = wl["spec"]
        require(spec.get("replicas") == 1, "rocksdb: replicas 1 (single writer)")
        require(spec.get("podManagementPolicy") == "OrderedReady",
                "rocksdb: podManagementPolicy OrderedReady")
        require((spec.get("updateStrategy") or {}).get("type") == "RollingUpdate",
                "rocksdb: updateStrategy RollingUpdate (delete before create)")
        claims = spec.get("volumeClaimTemplates", [])
        require(len(claims) == 1, "rocksdb: one volumeClaimTemplate")
        if claims:
            require(claims[0]["spec"].get("accessModes") == ["ReadWriteOncePod"],
                    "rocksdb: the volume is ReadWriteOncePod")
            mounts = [m for m in c.get("volumeMounts", [])
                      if m["name"] == claims[0]["metadata"]["name"]]
            require(mounts and mounts[0]["mountPath"] == "/data", "rocksdb: the volume at /data")
        require(flag_value(args, "data_dir") == "/data", "rocksdb: --data_dir=/data")
    else:
        require((wl["spec"].get("replicas") or 1) > 1, "redis: several replicas")
        require(flag_value(args, "store") == "redis" and flag_value(args, "redis_address"),
                "redis: --store=redis --redis_address")
    return report(overlay)


def report(overlay):
    if errors:
        for e in errors:
            print("FAIL %s: %s" % (overlay, e))
        return 1
    print("OK %s" % overlay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
