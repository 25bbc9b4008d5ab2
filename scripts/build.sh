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
#                             The benchmarks are not built there: the release build
#                             builds them and its suite runs their tests (tests/bench).
# Both test builds precompile the headers the tests share (-DRATELIMIT_PCH=ON,
# tests/CMakeLists.txt) and link with lld when it is installed (CMakeLists.txt).
# Extra arguments are passed to the CMake configure step (e.g. -DRATELIMIT_FUZZ_SECONDS=60).
# Environment: RATELIMIT_JOBS=N compile jobs (default: the number of CPUs).
#
# Compiles go through ccache when it is installed (CCACHE_DIR and the rest of ccache's settings
# come from the caller: scripts/test.sh sets them for CI). The container image's build stage
# (deploy/container/Dockerfile) runs `scripts/build.sh server`, the same compile commands as the
# release build for the two binaries, so a cache the release build filled serves it.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
RELEASE_FLAGS="-O2 -g1 -DNDEBUG"
jobs=${RATELIMIT_JOBS:-$(nproc)}
[[ $# -gt 0 ]] && shift
launcher=()
if command -v ccache >/dev/null; then
  # The project compiles C++ only, so there is no C launcher to set.
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # ccache hashes the locale variables (they change the compiler's messages): one fixed locale
  # for every compile, so that a build here and one in the container image hash alike.
  export LC_ALL=C.UTF-8 LANG=C.UTF-8
  unset LC_CTYPE LC_MESSAGES
fi
case $kind in
  release)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$RELEASE_FLAGS" -DRATELIMIT_BUILD_TESTS=ON \
      -DRATELIMIT_BUILD_BENCH=ON -DRATELIMIT_PCH=ON "${launcher[@]}" "$@" >/dev/null
    cmake --build build -j"$jobs"
    ;;
  server)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$RELEASE_FLAGS" -DRATELIMIT_BUILD_TESTS=OFF \
      -DRATELIMIT_BUILD_BENCH=OFF "${launcher[@]}" "$@" >/dev/null
    cmake --build build -j"$jobs" --target ratelimit-server ratelimit
    ;;
  asan)
    # No benchmarks: compiling and linking them with the sanitizers costs minutes, and their
    # tests run in the release suite.
    cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DRATELIMIT_SANITIZE=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
      -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_PCH=ON "${launcher[@]}" "$@" >/dev/null
    cmake --build build-asan -j"$jobs"
    ;;
  *)
    echo "usage: scripts/build.sh [release|server|asan] [cmake options...]" >&2
    exit 2
    ;;
esac
