#!/usr/bin/env bash
# Configures and builds everything.
#   scripts/build.sh          ./build: the release build (RelWithDebInfo, the system compiler).
#   scripts/build.sh asan     ./build-asan: clang with AddressSanitizer and
#                             UndefinedBehaviorSanitizer (-O1), clang's -Wthread-safety,
#                             every warning an error, and the libFuzzer targets of tests/fuzz.
# Extra arguments are passed to the CMake configure step (e.g. -DRATELIMIT_FUZZ_SECONDS=60).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
[[ $# -gt 0 ]] && shift
case $kind in
  release)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build build -j"$(nproc)"
    ;;
  asan)
    cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DRATELIMIT_SANITIZE=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" "$@" >/dev/null
    cmake --build build-asan -j"$(nproc)"
    ;;
  *)
    echo "usage: scripts/build.sh [release|asan] [cmake options...]" >&2
    exit 2
    ;;
esac
