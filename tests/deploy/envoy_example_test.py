#!/usr/bin/python3
"""deploy/envoy without Envoy or Kubernetes: the structure of envoy.yaml (the rate-limit filter,
failure_mode_deny, the LLM route's charge and refund), every descriptor it sends has a rule in
limits/, the files of deploy/envoy/gateway (Helm values, Gateway, HTTPRoute, BackendTrafficPolicy,
rendered by kubectl kustomize), the image installs the entry point the values run, and
ratelimit-from-env run with a stand-in ratelimit-server on PATH that prints its arguments: the
exact flags for the environment Envoy Gateway sets, and every bad value refused naming its
variable. (The limits themselves are loaded by the server's own loader in
EnvoyConfigTest.DeployExampleLoads.)

Usage: envoy_example_test.py REPO_ROOT KUBECTL RATELIMIT_SERVER
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml

REPO = sys.argv[1]
KUBECTL = sys.argv[2]
SERVER = sys.argv[3]
del sys.argv[1:]

ENVOY = os.path.join(REPO, "deploy", "envoy")
GATEWAY = os.path.join(ENVOY, "gateway")
SHIM = os.path.join(GATEWAY, "ratelimit-from-env")

# The fields of the messages the example uses, from Envoy's protos (route_components.proto's
# RateLimit and RateLimit.HitsAddend, ratelimit/v3/rate_limit.proto's RateLimit and
# RateLimitPerRoute): a misspelt field fails here, as Envoy would refuse it.
RATE_LIMIT_FIELDS = {"stage", "disable_key", "actions", "limit", "hits_addend",
                     "apply_on_stream_done", "x_ratelimit_option"}
HITS_ADDEND_FIELDS = {"number", "format", "is_negative_hits"}
METADATA_ACTION_FIELDS = {"descriptor_key", "metadata_key", "default_value", "source",
                          "skip_if_absent"}
PER_ROUTE_FIELDS = {"@type", "vh_rate_limits", "override_option", "rate_limits", "domain"}
FILTER_FIELDS = {"@type", "domain", "stage", "request_type", "timeout", "failure_mode_deny",
                 "rate_limited_as_resource_exhausted", "rate_limit_service",
                 "enable_x_ratelimit_headers", "disable_x_envoy_ratelimited_header",
                 "rate_limited_status", "response_headers_to_add", "status_on_error",
                 "stat_prefix", "filter_enabled", "filter_enforced", "failure_mode_deny_percent",
                 "rate_limits", "metadata_namespace", "enable_retry_after_header"}
FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"

# What Envoy Gateway sets on its rate-limit container (internal/infrastructure/kubernetes/ratelimit
# of envoyproxy/gateway), with a Redis backend and Prometheus metrics (its defaults).
GATEWAY_ENV = {
    "RUNTIME_ROOT": "/data",
    "RUNTIME_SUBDIRECTORY": "ratelimit",
    "RUNTIME_IGNOREDOTFILES": "true",
    "RUNTIME_WATCH_ROOT": "false",
    "LOG_LEVEL": "info",
    "USE_STATSD": "false",
    "CONFIG_TYPE": "GRPC_XDS_SOTW",
    "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
    "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
    "GRPC_SERVER_USE_TLS": "true",
    "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
    "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
    "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt",
    "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
    "REDIS_SOCKET_TYPE": "tcp",
    "REDIS_URL": "redis.redis-system.svc.cluster.local:6379",
    "USE_PROMETHEUS": "true",
    "PROMETHEUS_ADDR": ":19001",
    "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
}

GATEWAY_FLAGS = [
    "--listen=0.0.0.0:8081",
    "--tls_cert_file=/certs/tls.crt",
    "--tls_key_file=/certs/tls.key",
    "--tls_client_ca_file=/certs/ca.crt",
    "--envoy_xds_server=envoy-gateway:18001",
    "--envoy_xds_node_id=envoy-ratelimit",
    "--envoy_xds_tls",
    "--envoy_xds_tls_ca_file=/certs/ca.crt",
    "--envoy_xds_tls_cert_file=/certs/tls.crt",
    "--envoy_xds_tls_key_file=/certs/tls.key",
    "--store=redis",
    "--redis_address=redis.redis-system.svc.cluster.local:6379",
    "--metrics_listen=0.0.0.0:19001",
    "--otel_endpoint=",
    "--log_level=info",
]


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def envoy_config():
    with open(os.path.join(ENVOY, "envoy.yaml")) as f:
        return yaml.safe_load(f)


def http_connection_manager(envoy):
    listener = envoy["static_resources"]["listeners"][0]
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def routes(envoy):
    return http_connection_manager(envoy)["route_config"]["virtual_hosts"][0]["routes"]


class EnvoyYamlTest(unittest.TestCase):
    def test_rate_limit_filter_denies_when_the_service_fails(self):
        filters = http_connection_manager(envoy_config())["http_filters"]
        self.assertEqual(filters[-1]["name"], "envoy.filters.http.router")
        rl = [f for f in filters if f["name"] == "envoy.filters.http.ratelimit"]
        self.assertEqual(len(rl), 1)
        config = rl[0]["typed_config"]
        self.assertEqual(config["@type"], FILTER_TYPE)
        self.assertLessEqual(set(config), FILTER_FIELDS)
        self.assertIs(config["failure_mode_deny"], True)
        self.assertEqual(config["domain"], "frontproxy")
        self.assertEqual(config["rate_limit_service"]["transport_api_version"], "V3")
        self.assertEqual(config["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"],
                         "ratelimit")

    def test_llm_route_charges_the_estimate_and_refunds_at_stream_end(self):
        llm = [r for r in routes(envoy_config())
               if r["match"].get("prefix") == "/v1/" and "route" in r]
        self.assertEqual(len(llm), 1)
        route = llm[0]
        headers = {h["name"]: h for h in route["match"]["headers"]}
        self.assertEqual(headers["x-tokens"]["string_match"]["safe_regex"]["regex"],
                         "[1-9][0-9]{0,5}")
        self.assertIs(headers["x-user-id"]["present_match"], True)
        per_route = route["typed_per_filter_config"]["envoy.filters.http.ratelimit"]
        self.assertEqual(per_route["@type"], PER_ROUTE_TYPE)
        self.assertLessEqual(set(per_route), PER_ROUTE_FIELDS)
        limits = per_route["rate_limits"]
        for rl in limits:
            self.assertLessEqual(set(rl), RATE_LIMIT_FIELDS)
            if "hits_addend" in rl:
                self.assertLessEqual(set(rl["hits_addend"]), HITS_ADDEND_FIELDS)
        charge, refund, requests, in_flight, release = limits
        self.assertEqual(charge["hits_addend"], {"format": "%REQ(x-tokens)%"})
        self.assertNotIn("apply_on_stream_done", charge)
        self.assertEqual(refund["hits_addend"],
                         {"format": "%RESP(x-tokens-unused)%", "is_negative_hits": True})
        self.assertIs(refund["apply_on_stream_done"], True)
        # The refund goes back to the very descriptor the charge took from.
        self.assertEqual(refund["actions"], charge["actions"])
        self.assertEqual(charge["actions"][0], {"generic_key": {"descriptor_value": "llm_tokens"}})
        self.assertNotIn("hits_addend", requests)
        self.assertEqual(requests["actions"][0],
                         {"generic_key": {"descriptor_value": "llm_requests"}})
        # A slot in flight on the request, given back by its lease's token when the stream is
        # done (docs/envoy.md, "Concurrency rules").
        self.assertEqual(in_flight["actions"][0],
                         {"generic_key": {"descriptor_value": "llm_in_flight"}})
        self.assertNotIn("apply_on_stream_done", in_flight)
        self.assertIs(release["apply_on_stream_done"], True)
        self.assertEqual(len(release["actions"]), 1)
        metadata = release["actions"][0]["metadata"]
        self.assertLessEqual(set(metadata), METADATA_ACTION_FIELDS)
        self.assertEqual(metadata["descriptor_key"], "ratelimit.lease")
        self.assertEqual(metadata["metadata_key"], {"key": "envoy.filters.http.ratelimit",
                                                    "path": [{"key": "ratelimit.lease"}]})
        self.assertEqual(metadata["source"], "DYNAMIC")
        # Without a token, no descriptor at all (a default or skip_if_absent would send one).
        self.assertNotIn("default_value", metadata)
        self.assertNotIn("skip_if_absent", metadata)
        # The lease outlives the longest call the route lets run.
        self.assertEqual(route["route"]["timeout"], "300s")

    def test_llm_requests_without_the_headers_are_answered_400(self):
        rs = routes(envoy_config())
        i = next(i for i, r in enumerate(rs) if "typed_per_filter_config" in r)
        fallback = rs[i + 1]
        self.assertEqual(fallback["match"], {"prefix": "/v1/"})
        self.assertEqual(fallback["direct_response"]["status"], 400)

    def test_every_generic_key_sent_has_a_rule(self):
        sent = set()
        for r in routes(envoy_config()):
            blocks = list(r.get("route", {}).get("rate_limits", []))
            blocks += r.get("typed_per_filter_config", {}).get(
                "envoy.filters.http.ratelimit", {}).get("rate_limits", [])
            for rl in blocks:
                for a in rl["actions"]:
                    if "generic_key" in a:
                        sent.add(a["generic_key"]["descriptor_value"])
        with open(os.path.join(ENVOY, "limits", "frontproxy.yaml")) as f:
            limits = yaml.safe_load(f)
        ruled = {d.get("value") for d in limits["descriptors"] if d["key"] == "generic_key"}
        self.assertEqual(sent - ruled, set())
        self.assertIn("llm_tokens", sent)


class GatewayFilesTest(unittest.TestCase):
    def test_every_yaml_file_parses(self):
        names = sorted(n for n in os.listdir(GATEWAY) if n.endswith((".yaml", ".yml")))
        self.assertEqual(names, ["backendtrafficpolicy.yaml", "gateway.yaml",
                                 "kustomization.yaml", "values.yaml"])
        for n in names:
            self.assertTrue(load_all(os.path.join(GATEWAY, n)), n)

    def test_kustomize_renders_the_policy_and_what_it_targets(self):
        out = subprocess.run([KUBECTL, "kustomize", GATEWAY], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        docs = {d["kind"]: d for d in yaml.safe_load_all(out.stdout)}
        self.assertEqual(set(docs), {"GatewayClass", "Gateway", "HTTPRoute", "BackendTrafficPolicy"})
        self.assertEqual(docs["GatewayClass"]["spec"]["controllerName"],
                         "gateway.envoyproxy.io/gatewayclass-controller")
        self.assertEqual(docs["Gateway"]["spec"]["gatewayClassName"],
                         docs["GatewayClass"]["metadata"]["name"])
        self.assertEqual(docs["HTTPRoute"]["spec"]["parentRefs"][0]["name"],
                         docs["Gateway"]["metadata"]["name"])
        policy = docs["BackendTrafficPolicy"]
        self.assertEqual(policy["apiVersion"], "gateway.envoyproxy.io/v1alpha1")
        self.assertEqual(policy["metadata"]["namespace"], docs["HTTPRoute"]["metadata"]["namespace"])
        self.assertEqual(policy["spec"]["targetRefs"], [{
            "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
            "name": docs["HTTPRoute"]["metadata"]["name"]}])
        rate_limit = policy["spec"]["rateLimit"]
        self.assertEqual(rate_limit["type"], "Global")
        rules = rate_limit["global"]["rules"]
        self.assertEqual(len(rules), 2)
        self.assertEqual(rules[0]["clientSelectors"][0]["headers"],
                         [{"type": "Distinct", "name": "x-user-id"}])
        self.assertNotIn("clientSelectors", rules[1])
        for rule in rules:
            self.assertIn(rule["limit"]["unit"], {"Second", "Minute", "Hour", "Day"})
            self.assertGreater(rule["limit"]["requests"], 0)

    def test_values_run_the_entry_point_the_image_installs(self):
        with open(os.path.join(GATEWAY, "values.yaml")) as f:
            values = yaml.safe_load(f)
        image = values["global"]["images"]["ratelimit"]["image"]
        registry, repository = image.split("/", 1)  # the chart needs registry/repository:tag
        self.assertIn(":", repository)
        eg = values["config"]["envoyGateway"]
        self.assertEqual(eg["rateLimit"]["backend"]["type"], "Redis")
        self.assertTrue(eg["rateLimit"]["backend"]["redis"]["url"])
        deployment = eg["provider"]["kubernetes"]["rateLimitDeployment"]
        self.assertEqual(deployment["patch"]["type"], "StrategicMerge")
        containers = deployment["patch"]["value"]["spec"]["template"]["spec"]["containers"]
        self.assertEqual([c["name"] for c in containers], ["envoy-ratelimit"])
        container = containers[0]
        command = container["command"]
        with open(os.path.join(REPO, "deploy", "container", "Dockerfile")) as f:
            dockerfile = f.read()
        self.assertIn("COPY deploy/envoy/gateway/ratelimit-from-env " + command[0], dockerfile)
        self.assertIn("USER 65532:65532", dockerfile)
        self.assertEqual(container["securityContext"]["runAsUser"], 65532)
        # The probes reach /healthz on the metrics port the shim gives Envoy Gateway's
        # PROMETHEUS_ADDR.
        metrics_port = int(GATEWAY_ENV["PROMETHEUS_ADDR"].rsplit(":", 1)[1])
        self.assertIn("--metrics_listen=0.0.0.0:%d" % metrics_port, GATEWAY_FLAGS)
        for probe in ("startupProbe", "readinessProbe"):
            self.assertEqual(container[probe]["httpGet"], {"path": "/healthz", "port": metrics_port})
        self.assertIsNone(container["livenessProbe"]["httpGet"])
        self.assertEqual(container["livenessProbe"]["tcpSocket"]["port"], 8081)
        # Variables added through container.env are ones the shim maps.
        for var in deployment["container"]["env"]:
            env = dict(GATEWAY_ENV, **{var["name"]: var["value"]})
            self.assertEqual(ShimTest.run_shim(env).returncode, 0, var)


STAND_IN = None


def setUpModule():
    # A ratelimit-server that prints its arguments, one a line, and the one variable the shim
    # exports, on stderr.
    global STAND_IN
    STAND_IN = tempfile.TemporaryDirectory()
    path = os.path.join(STAND_IN.name, "ratelimit-server")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nprintf "%s\\n" "$@"\n'
                'printf "OTEL_RESOURCE_ATTRIBUTES=%s\\n" "${OTEL_RESOURCE_ATTRIBUTES-}" >&2\n')
    os.chmod(path, 0o755)


def tearDownModule():
    STAND_IN.cleanup()


# Every variable the shim maps to a flag, set to a value that produces its flag.
EVERY_OPTION = dict(
    GATEWAY_ENV, LIMIT_RESPONSE_HEADERS_ENABLED="true", SHADOW_MODE="true", QUOTA_MODE="true",
    RESPONSE_DYNAMIC_METADATA="true", NEAR_LIMIT_RATIO="0.8", LIMIT_LIMIT_HEADER="X-RateLimit-Limit",
    LIMIT_REMAINING_HEADER="X-RateLimit-Remaining", LIMIT_RESET_HEADER="X-RateLimit-Reset",
    CONFIG_GRPC_XDS_NODE_METADATA="a=b", CONFIG_GRPC_XDS_SERVER_TLS_SAN="envoy-gateway",
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="1s", XDS_CLIENT_BACKOFF_MAX_INTERVAL="1m",
    REDIS_TIMEOUT="1s", CACHE_KEY_PREFIX="eg:", LOG_FORMAT="json", TRACING_ENABLED="true",
    TRACING_EXPORTER_PROTOCOL="grpc", OTEL_EXPORTER_OTLP_ENDPOINT="collector:4317",
    TRACING_SERVICE_NAME="rl", TRACING_SAMPLING_RATE="1")


class ShimTest(unittest.TestCase):
    @staticmethod
    def run_shim(env, *args):
        full = {"PATH": STAND_IN.name + ":/usr/bin:/bin"}
        full.update(env)
        return subprocess.run([SHIM, *args], env=full, capture_output=True, text=True)

    def flags(self, env, *args):
        r = self.run_shim(env, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines()

    def refused(self, env, variable):
        r = self.run_shim(env)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "", "the server was not started")
        self.assertIn("ratelimit-from-env: " + variable, r.stderr)

    def test_every_flag_emitted_is_a_flag_of_the_server(self):
        out = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        server = set(re.findall(r"^  --([a-z0-9_]+)=", out.stdout, re.M))
        emitted = set()
        for env in (EVERY_OPTION, {"REDIS_URL": "redis:6379", "GRPC_SERVER_USE_TLS": "false"}):
            emitted |= {f[2:].split("=", 1)[0] for f in self.flags(env)}
        self.assertIn("envoy_config_dir", emitted)
        self.assertIn("envoy_xds_server", emitted)
        self.assertEqual(sorted(emitted - server), [])

    def test_the_environment_envoy_gateway_sets(self):
        self.assertEqual(self.flags(GATEWAY_ENV), GATEWAY_FLAGS)

    def test_print_command_prints_what_it_would_run(self):
        out = self.flags(GATEWAY_ENV, "--print-command", "--log_format=json")
        self.assertEqual(out, ["ratelimit-server"] + GATEWAY_FLAGS + ["--log_format=json"])

    def test_arguments_follow_the_generated_flags_unchanged(self):
        out = self.flags(GATEWAY_ENV, "--redis_password_file=/secrets/it's here", "")
        self.assertEqual(out, GATEWAY_FLAGS + ["--redis_password_file=/secrets/it's here", ""])

    def test_the_reference_variables_an_operator_adds(self):
        env = dict(GATEWAY_ENV, LIMIT_RESPONSE_HEADERS_ENABLED="true", SHADOW_MODE="1",
                   QUOTA_MODE="True", RESPONSE_DYNAMIC_METADATA="t", NEAR_LIMIT_RATIO="0.9",
                   CONFIG_GRPC_XDS_NODE_METADATA="cluster:eu-1,zone=a",
                   CONFIG_GRPC_XDS_SERVER_TLS_SAN="envoy-gateway",
                   XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="1s", XDS_CLIENT_BACKOFF_MAX_INTERVAL="1m",
                   REDIS_TYPE="cluster", REDIS_TIMEOUT="500ms", CACHE_KEY_PREFIX="eg:",
                   LOG_LEVEL="WARN", LOG_FORMAT="json", LIMIT_LIMIT_HEADER="X-RateLimit-Limit",
                   LIMIT_RESET_HEADER="X-RateLimit-Reset")
        out = self.flags(env)
        for f in ["--envoy_ratelimit_headers", "--envoy_shadow_mode", "--envoy_quota_mode",
                  "--envoy_response_dynamic_metadata", "--envoy_near_limit_ratio=0.9",
                  "--envoy_xds_node_metadata=cluster=eu-1,zone=a",
                  "--envoy_xds_tls_server_name=envoy-gateway", "--envoy_xds_retry_initial=1s",
                  "--envoy_xds_retry_max=1m", "--redis_timeout=500ms", "--redis_key_prefix=eg:",
                  "--log_level=warning", "--log_format=json",
                  "--envoy_ratelimit_limit_header=X-RateLimit-Limit",
                  "--envoy_ratelimit_reset_header=X-RateLimit-Reset"]:
            self.assertIn(f, out)
        self.assertNotIn("--log_level=info", out)

    def test_false_values_add_nothing(self):
        env = dict(GATEWAY_ENV, LIMIT_RESPONSE_HEADERS_ENABLED="false", SHADOW_MODE="0",
                   QUOTA_MODE="False", RESPONSE_DYNAMIC_METADATA="f", REDIS_TLS="false",
                   USE_DOG_STATSD="false", MERGE_DOMAIN_CONFIG="FALSE")
        self.assertEqual(self.flags(env), GATEWAY_FLAGS)

    def test_file_configuration_plaintext_and_the_reference_http_port(self):
        env = {"RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit",
               "REDIS_URL": "redis:6379", "PORT": "8090", "GRPC_PORT": "9081"}
        self.assertEqual(self.flags(env), [
            "--listen=0.0.0.0:9081", "--allow_insecure_listen",
            "--envoy_config_dir=/srv/runtime/ratelimit/config", "--store=redis",
            "--redis_address=redis:6379", "--metrics_listen=0.0.0.0:8090", "--otel_endpoint="])
        loopback = self.flags(dict(env, GRPC_HOST="127.0.0.1"))
        self.assertIn("--listen=127.0.0.1:9081", loopback)
        self.assertNotIn("--allow_insecure_listen", loopback)

    def test_tracing_over_otlp_grpc(self):
        env = dict(GATEWAY_ENV, TRACING_ENABLED="true", TRACING_EXPORTER_PROTOCOL="grpc",
                   OTEL_EXPORTER_OTLP_ENDPOINT="http://otel-collector.monitoring:4317",
                   TRACING_SERVICE_NAME="envoy-ratelimit", TRACING_SAMPLING_RATE="0.5",
                   TRACING_SERVICE_NAMESPACE="envoy-gateway-system",
                   TRACING_SERVICE_INSTANCE_ID="envoy-ratelimit-7d9f-abcde")
        r = self.run_shim(env)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.splitlines()
        for f in ["--otel_endpoint=http://otel-collector.monitoring:4317",
                  "--otel_service_name=envoy-ratelimit", "--otel_sample_ratio=0.5"]:
            self.assertIn(f, out)
        self.assertNotIn("--otel_endpoint=", out)
        self.assertIn("OTEL_RESOURCE_ATTRIBUTES=service.namespace=envoy-gateway-system,"
                      "service.instance.id=envoy-ratelimit-7d9f-abcde", r.stderr)

    def test_bad_and_unsupported_values_are_refused_naming_the_variable(self):
        cases = [
            ("SHADOW_MODE", "yes"), ("QUOTA_MODE", "on"), ("GRPC_SERVER_USE_TLS", "enabled"),
            ("NEAR_LIMIT_RATIO", "1.5"), ("NEAR_LIMIT_RATIO", "-0.1"), ("GRPC_PORT", "70000"),
            ("GRPC_PORT", "http"), ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "https://envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "cluster"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-a:b"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "a minute"), ("BACKEND_TYPE", "memcache"),
            ("REDIS_SOCKET_TYPE", "unix"), ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "redis://redis:6379"), ("REDIS_URL", ""), ("REDIS_AUTH", "secret"),
            ("REDIS_TLS", "true"), ("REDIS_PERSECOND", "true"), ("REDIS_TIMEOUT", "10"),
            ("USE_STATSD", "true"), ("PROMETHEUS_PATH", "/stats"), ("GRPC_UDS", "/tmp/rl.sock"),
            ("GRPC_CLIENT_TLS_SAN", "envoy"), ("GRPC_CLIENT_TLS_CACERT", "/other/ca.crt"),
            ("MERGE_DOMAIN_CONFIG", "true"), ("LOG_LEVEL", "verbose"), ("LOG_FORMAT", "xml"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "maybe"),
        ]
        for variable, value in cases:
            with self.subTest(variable=variable, value=value):
                self.refused(dict(GATEWAY_ENV, **{variable: value}), variable)
        with self.subTest("tracing over OTLP/HTTP, the reference's default"):
            self.refused(dict(GATEWAY_ENV, TRACING_ENABLED="true",
                              OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318"),
                         "TRACING_EXPORTER_PROTOCOL")
        with self.subTest("TLS without its certificate"):
            env = dict(GATEWAY_ENV)
            del env["GRPC_SERVER_TLS_CERT"]
            self.refused(env, "GRPC_SERVER_TLS_CERT")
        with self.subTest("an xDS client key without its certificate"):
            env = dict(GATEWAY_ENV)
            del env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"]
            self.refused(env, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")


if __name__ == "__main__":
    unittest.main()
