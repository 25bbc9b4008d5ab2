#!/usr/bin/env bash
# Sets up, builds and runs every test:
#   1. the release build (./build) and its test suite;
#   2. the container image (scripts/container-test.sh: podman build of
#      deploy/container/Dockerfile, then the image checked end to end), while step 3 compiles;
#      its build stage takes the objects it compiles from the release build's compiler cache
#      (.cache/ccache);
#   3. the sanitizer build (./build-asan: clang, AddressSanitizer + UndefinedBehaviorSanitizer,
#      -Wthread-safety, every warning an error) and its test suite, which also replays each fuzz
#      target's checked-in corpus (tests/fuzz/corpus) and then fuzzes each target from a fixed
#      seed for a fixed number of inputs (about 20 s each; tests/fuzz/CMakeLists.txt). The
#      benchmarks are built, and their tests run, in step 1 only.
# Environment: RATELIMIT_QUICK=1 runs step 1 only (the quick loop);
#   RATELIMIT_CONTAINER_TEST=0 skips step 2 (for machines without root or podman);
#   RATELIMIT_FUZZ_SECONDS=N caps each fuzz run at N seconds (default 120; 0: replay the corpora
#   only); CCACHE_DIR: the compiler cache of every build (default .cache/ccache in the clone);
#   RATELIMIT_DISK_GB=N: the free disk the run needs before it starts (default 10, quick 4).
# Exits non-zero when a build or a test fails; the output ends with the last CTest summary.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=${RATELIMIT_QUICK:-0}
FUZZ_SECONDS=${RATELIMIT_FUZZ_SECONDS:-120}
JOBS=$(nproc)
# Each step's time, so that a slow step shows in the output.
took() { echo "test.sh: $1 done at ${SECONDS} s"; }

# The compiler cache (ccache, scripts/build.sh) lives in the clone, so that a run starts cold and
# depends on nothing outside it (CCACHE_DIR set by the caller wins). Paths are hashed relative to
# the clone and the working directory is not hashed, so the container image's build stage, which
# compiles the same sources under /src (scripts/container-test.sh mounts this directory there),
# reuses the release build's objects instead of compiling the server again.
# In CI with that in-clone cache (CI=true: a fresh clone, the cache empty) nothing ever reads
# the sanitizer build's entries, so that build skips ccache and the preprocessor run it adds to
# every miss (about 1 s of a 12-26 s compile).
asan_env=()
[[ ${CI:-} == true && -z ${CCACHE_DIR:-} ]] && asan_env=(CCACHE_DISABLE=1)
export CCACHE_DIR=${CCACHE_DIR:-$PWD/.cache/ccache}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
mkdir -p "$CCACHE_DIR"

# The builds need about 9 GB on this disk (measured on a fresh clone: ./build 3.3 GB, ./build-asan
# 4.4 GB, the container image's layers about 1 GB). A disk that fills during a build does not say
# so: the linker dies of a "Bus error" writing its mapped output, twenty minutes in. So the space
# is checked first; what the builds already hold counts as available (a rebuild reuses it).
# RATELIMIT_DISK_GB sets the space needed (default 10; 4 when RATELIMIT_QUICK=1).
need_gb=${RATELIMIT_DISK_GB:-$([[ $QUICK == 1 ]] && echo 4 || echo 10)}
free_kb=$(df --output=avail -k . | tail -1)
held_kb=0
for dir in build build-asan; do
  if [[ -d $dir ]]; then held_kb=$((held_kb + $(du -sk "$dir" | cut -f1))); fi
done
if (( (free_kb + held_kb) / 1048576 < need_gb )); then
  echo "test.sh: the builds need about ${need_gb} GB on the disk of $PWD;" \
    "$((free_kb / 1048576)) GB is free. Free some space and run it again." >&2
  exit 1
fi

scripts/setup.sh
took setup
scripts/build.sh release
took "release build"
(cd build && ctest --output-on-failure -j"$JOBS" --timeout 300)
took "release tests"
[[ $QUICK == 1 ]] && exit 0

# The container image is built and checked while the sanitizer build compiles: its steps mostly
# wait on the network (debootstrap, the image's apt-get) and take its compiles from the release
# build's cache, so beside a compile it adds minutes of wall time saved, not of CPU contended.
# Its output is shown when it ends.
container_pid=""
trap '[[ -z $container_pid ]] || kill "$container_pid" 2>/dev/null || true' EXIT
if [[ ${RATELIMIT_CONTAINER_TEST:-1} == 1 ]]; then
  mkdir -p build
  scripts/container-test.sh >build/container-test.log 2>&1 &
  container_pid=$!
fi

env "${asan_env[@]}" scripts/build.sh asan -DRATELIMIT_FUZZ_SECONDS="$FUZZ_SECONDS"
took "sanitizer build"
if [[ -n $container_pid ]]; then
  container_rc=0
  wait "$container_pid" || container_rc=$?
  container_pid=""
  cat build/container-test.log
  [[ $container_rc == 0 ]] || { echo "test.sh: the container image check failed" >&2; exit 1; }
  took "container image"
fi
# Sanitizer reports abort the test that triggers them (halt_on_error, -fno-sanitize-recover);
# third-party leaks reported at exit are listed, each with its reason, in the suppressions file.
ASAN_DEFAULTS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-$ASAN_DEFAULTS}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
LSAN_SUPP=$PWD/tests/sanitizer/lsan.supp
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$LSAN_SUPP:print_suppressions=0}
exclude=()
[[ $FUZZ_SECONDS == 0 ]] && exclude=(-E '^fuzz\..*\.fuzz$')
cd build-asan
ctest --output-on-failure -j"$JOBS" --timeout 600 "${exclude[@]}"
