#!/usr/bin/env bash
# Installs the Debian packages the builds (release and sanitizer), the tests, the fuzz targets and
# the benchmarks need. Idempotent; skips apt when everything is already installed.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev libyaml-cpp-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus
  # The sanitizer build and the fuzz targets (scripts/build.sh asan): clang 14 and its runtimes
  # (ASan, UBSan, libFuzzer).
  clang libclang-rt-14-dev
  # The Redis backend: hiredis for the protocol; redis-server for the tests that run one.
  redis-server libhiredis-dev
)
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
