#!/usr/bin/env bash
# Installs the Debian packages the builds (release and sanitizer), the tests, the fuzz targets and
# the benchmarks need. Idempotent; skips apt when everything is already installed.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev libyaml-cpp-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus
  # The Redis store: hiredis for the protocol; redis-server (and redis-cli) for the tests.
  libhiredis-dev redis-server
  # The sanitizer build and the fuzz targets (scripts/build.sh asan): clang 14 and its runtimes
  # (ASan, UBSan, libFuzzer).
  clang libclang-rt-14-dev
  # TLS: OpenSSL headers, the openssl tool (test certificates), systemd-analyze (the unit's test).
  libssl-dev openssl systemd
  # The deploy/ checks (tests/deploy): Python with PyYAML.
  python3 python3-yaml
  # The Python client (client/python): its dependencies and tests (the stubs come from protoc
  # and grpc_python_plugin, above; mypy checks its type hints).
  python3-grpcio python3-protobuf python3-venv python3-pytest python3-fastapi python3-httpx mypy
)
# `kubectl kustomize` renders deploy/kubernetes in the tests: Debian's kubernetes-client, unless a
# kubectl is already installed (another package's kubectl would conflict with it).
command -v kubectl >/dev/null || packages+=(kubernetes-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
