#!/usr/bin/env bash
# Configures and builds everything.
#   scripts/build.sh          ./build: the release build (RelWithDebInfo with -O2 and -g1: line
#                             tables and function names, enough for backtraces and perf, less to
#                             compile and link than full debug information), the system
#                             compiler, tests and benchmarks included.
#   scripts/build.sh server   ./build: only ratelimit-server and the ratelimit CLI (what
#                             scripts/run.sh needs; no test or benchmark package required).
#   scripts/build.sh asan     ./build-asan: clang with AddressSanitizer and
#                             UndefinedBehaviorSanitizer (-O1), clang's -Wthread-safety,
#                             every warning an error, and the libFuzzer targets of tests/fuzz.
# Extra arguments are passed to the CMake configure step (e.g. -DRATELIMIT_FUZZ_SECONDS=60).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
RELEASE_FLAGS="-O2 -g1 -DNDEBUG"
[[ $# -gt 0 ]] && shift
case $kind in
  release)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$RELEASE_FLAGS" -DRATELIMIT_BUILD_TESTS=ON \
      -DRATELIMIT_BUILD_BENCH=ON "$@" >/dev/null
    cmake --build build -j"$(nproc)"
    ;;
  server)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$RELEASE_FLAGS" -DRATELIMIT_BUILD_TESTS=OFF \
      -DRATELIMIT_BUILD_BENCH=OFF "$@" >/dev/null
    cmake --build build -j"$(nproc)" --target ratelimit-server ratelimit
    ;;
  asan)
    cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DRATELIMIT_SANITIZE=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" "$@" >/dev/null
    cmake --build build-asan -j"$(nproc)"
    ;;
  *)
    echo "usage: scripts/build.sh [release|server|asan] [cmake options...]" >&2
    exit 2
    ;;
esac
