#!/usr/bin/env bash
# Installs the Debian packages the builds (release and sanitizer), the tests, the fuzz targets and
# the benchmarks need. Idempotent; skips apt when everything is already installed.
#   --build-only: only what compiling ratelimit-server and the CLI needs (the container image's
#   build stage), ccache included.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  # The compiler cache scripts/build.sh uses when it is installed (CI shares it between the
  # release build and the container image's build stage).
  ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev libyaml-cpp-dev libcpp-httplib-dev libssl-dev
  # The Redis store's protocol library.
  libhiredis-dev
)
if [ "${1:-}" != "--build-only" ]; then
packages+=(
  libgtest-dev libgmock-dev libbenchmark-dev prometheus
  # The Redis store's tests: redis-server (and redis-cli).
  redis-server
  # The sanitizer build and the fuzz targets (scripts/build.sh asan): clang 14 and its runtimes
  # (ASan, UBSan, libFuzzer).
  clang libclang-rt-14-dev
  # lld: links the test executables in a fraction of the GNU linker's time (CMakeLists.txt uses
  # it when it is installed).
  lld
  # The formatting check (scripts/format.sh --check, a test of the suite).
  clang-format
  # TLS tests: the openssl tool (test certificates), systemd-analyze (the unit's test).
  openssl systemd
  # The deploy/ checks (tests/deploy): Python with PyYAML.
  python3 python3-yaml
  # The Go client (client/go): Go, gRPC and protobuf sources, protoc plugins (client/go/generate.sh).
  golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc
  # The Python client (client/python): its dependencies and tests (the stubs come from protoc
  # and grpc_python_plugin, above; mypy checks its type hints).
  python3-grpcio python3-protobuf python3-venv python3-pytest python3-fastapi python3-httpx mypy
)
# `kubectl kustomize` renders deploy/kubernetes in the tests: Debian's kubernetes-client, unless a
# kubectl is already installed (another package's kubectl would conflict with it).
command -v kubectl >/dev/null || packages+=(kubernetes-client)
# The TypeScript client's tests (client/node): Debian's node and npm, unless a node with npm is
# already installed (NodeSource's nodejs brings its own npm and conflicts with Debian's).
command -v npm >/dev/null || packages+=(nodejs npm)
fi
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
