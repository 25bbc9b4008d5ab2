#!/usr/bin/env bash
# Measures the figures docs/performance.md reports (issue 2) and prints them as markdown on stdout;
# progress and raw output go to stderr.
#
#   1. In process (Google Benchmark, bench/store_bench.cc): Consume decisions/s and p50/p99 through
#      Limiter::Evaluate on the RocksDB store (default options; and sync=true) and the in-memory
#      store, one hot key and 1M distinct keys, 1 and 2 threads.
#   2. Bytes on disk per idle key before and after compaction (bench/disk_usage.cc).
#   3. End to end: the load generator (bench/loadgen.cc) against the real ratelimit-server and
#      against the empty-handler server (bench/null_server.cc), 64 calls in flight, on loopback;
#      then, if h2load is installed, the same request from h2load against the null server,
#      ratelimit-server, and ratelimit-server's code on the in-memory store
#      (bench/memory_server.cc). On a machine with 2+ CPUs the server is pinned to CPU 0 and the
#      client to CPU 1 (taskset): the two share no core, and every server gets the same one
#      core. Rounds alternate the servers, so a drift in machine speed hits all of them.
#   4. Envoy's RLS v3 API: ShouldRateLimit with 1 and 3 descriptors per request against
#      ratelimit-server started with --envoy_config_dir (a generated domain "bench", descriptors
#      d0..d9, each a limit so large nothing is denied), in the rounds of 3, same pinning.
#   5. The cost of tracing: v1 Consume (hot key) against ratelimit-server with tracing off, with
#      --otel_sample_ratio=0.01 and with 1, exporting to bench/null_collector.cc (an OTLP
#      collector that counts and discards spans, pinned with the load generator); rounds
#      alternate the three settings. Each server is driven by h2load first (the server's own
#      overhead: the gRPC load generator is bound by its own CPU and shows it only in part), then
#      by the load generator. Reports the spans the collector received and the server's
#      ratelimit_trace_spans_dropped_total (from its /metrics).
#   6. The server's own cost per request (h2load, whose cost per request is far below a gRPC
#      client's, so the server's one core is the bottleneck): the empty handler
#      (bench/null_server.cc), v1 Consume on one hot key (ratelimit-server, RocksDB), and Envoy's
#      ShouldRateLimit with 1 and with 3 descriptors and with 1 descriptor whose rule has two
#      limits (rate_limits), every one with the same h2load flags
#      (H2LOAD_FLAGS), the server on CPU 0 and h2load on CPU 1; H2LOAD_ROUNDS rounds alternating
#      the targets, medians, and each target's ratio to the empty handler.
#   7. RLQS against RLS v3 (bench/rlqs_bench.cc): one global limit held by RLQS_CLIENTS
#      simulated Envoys on the Rate Limit Quota Service (each its own stream, reporting every
#      second, enforcing its assigned token bucket, offering twice the limit in total with unequal
#      demands), then by as many clients calling ShouldRateLimit once per request at the same
#      demands; ratelimit-server started with --rlqs and a generated domain "rlqs_bench" whose
#      descriptor and quota_buckets rule share each limit of RLQS_LIMITS, one run of the tool per
#      limit. Requests admitted per second both ways, the server's CPU per admitted request (its
#      /proc/PID/stat over each measured window; and over as long with no client, first) and the
#      ratio, RLQS's over-assignment (admitted above the limit, bound 5%) and the server's
#      ratelimit_rlqs_over_assignments_total.
#   8. Runtime overrides (scripts/bench-overrides.sh, if h2load is installed): v1 Consume of a
#      limits-file limit against ratelimit-server on data directories holding 0, 1,000 and
#      100,000 overrides of it (bench/override_seed.cc; on tmpfs), and 100,000 with one matching
#      the key, driven by h2load as in 6 (H2LOAD_ROUNDS rounds alternating the directories,
#      medians, the ratio to none; the server's RSS); then the time for a change set on one server
#      to decide on a second one sharing its store (bench/override_propagation.cc, two servers on
#      a local Redis Cluster, on the empty store and with 100,000 overrides in it; one RocksDB
#      server's apply latency without redis-server).
#   9. Concurrency limits end to end (scripts/bench-leases.sh): acquire+release pairs
#      (bench/lease_loadgen.cc) beside Consume (the load generator as in 3), one hot key and
#      10,000 keys, against one ratelimit-server on RocksDB, then one on a local Redis Cluster
#      (--store=redis); LEASE_ROUNDS rounds alternating the four runs, medians, and a pair's rate
#      over Consume's.
#   Every ratelimit-server started here listens on port 0 for gRPC and for /metrics.
#
# Usage: scripts/bench.sh [> results.md]
#        SECTIONS=h2load scripts/bench.sh   # section 6 only (about 2 minutes once built)
#        SECTIONS=rlqs scripts/bench.sh     # section 7 only (about a minute once built)
#        SECTIONS=overrides scripts/bench.sh  # section 8 only (about 4 minutes once built)
#        SECTIONS=leases scripts/bench.sh   # section 9 only (about 5 minutes once built)
# Environment (defaults): BUILD_DIR (build-bench), DURATION (10s), WARMUP (1s), CONCURRENCY (64),
#   ROUNDS (2), DISK_KEYS (1000000), LOADGEN_FLAGS (--threads=2 --channels=1),
#   STORE_BENCH_FLAGS (none; e.g. --benchmark_filter=hot_key), SKIP_BUILD (0),
#   H2LOAD (1 if h2load is installed), H2LOAD_DURATION (5s), TRACE_ROUNDS (3), SKIP_SETUP (0),
#   SECTIONS (all; or h2load, rlqs, overrides or leases), H2LOAD_FLAGS (-c 8 -m 32 -t 1), H2LOAD_ROUNDS (3),
#   RLQS_LIMITS (5000 1000000: requests/s, one run each), RLQS_CLIENTS (10), RLQS_DURATION (10s,
#   each way), RLQS_FLAGS (none; more flags of ratelimit_rlqs_bench); section 8's in
#   scripts/bench-overrides.sh (OVERRIDE_CHANGES, OVERRIDE_LOAD_RPS, OVERRIDE_TMPDIR); section 9's
#   in scripts/bench-leases.sh (LEASE_ROUNDS, LEASE_KEYS, LEASE_STORES); LEASE_AB_BUILD_DIR (none: a
#   second build's directory, whose server section 9 then compares with this build's, side by
#   side under one load: scripts/bench-ab.sh, with LEASE_AB_LOAD, LEASE_AB_KEYS, LEASE_AB_ENV).
# Needs Debian: first runs scripts/setup.sh (the build's packages) and installs jq and
# nghttp2-client (h2load) with apt-get when they are missing (SKIP_SETUP=1: neither); taskset
# (util-linux) if available; redis-server and redis-cli (Debian: redis-server, redis-tools) for
# section 8's two replicas and section 9's Redis Cluster (without them: LEASE_STORES=rocksdb).
# Takes about 5 minutes once built (2 cores). Sends traffic to 127.0.0.1 only; stops everything
# it started, also on Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CONCURRENCY=${CONCURRENCY:-64}
ROUNDS=${ROUNDS:-2}
DISK_KEYS=${DISK_KEYS:-1000000}
LOADGEN_FLAGS=${LOADGEN_FLAGS:---threads=2 --channels=1}
STORE_BENCH_FLAGS=${STORE_BENCH_FLAGS:-}
SKIP_BUILD=${SKIP_BUILD:-0}
H2LOAD_DURATION=${H2LOAD_DURATION:-5s}
TRACE_ROUNDS=${TRACE_ROUNDS:-3}
SKIP_SETUP=${SKIP_SETUP:-0}
SECTIONS=${SECTIONS:-all}
H2LOAD_FLAGS=${H2LOAD_FLAGS:--c 8 -m 32 -t 1}
H2LOAD_ROUNDS=${H2LOAD_ROUNDS:-3}
RLQS_LIMITS=${RLQS_LIMITS:-5000 1000000}
RLQS_CLIENTS=${RLQS_CLIENTS:-10}
RLQS_DURATION=${RLQS_DURATION:-10s}
RLQS_FLAGS=${RLQS_FLAGS:-}
[[ $SECTIONS =~ ^(all|h2load|rlqs|overrides|leases)$ ]] ||
  { echo "SECTIONS must be all, h2load, rlqs, overrides or leases" >&2; exit 2; }

# Tracing is on only where section 5 turns it on, whatever this environment says.
unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_TRACES_SAMPLER \
  OTEL_TRACES_SAMPLER_ARG

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- packages ----------------------------------------------------------------------------------
# CI machines start bare: the build's packages (scripts/setup.sh), then the tools of this script.
if [[ $SKIP_SETUP != 1 ]]; then
  log "checking packages (scripts/setup.sh, jq, nghttp2-client)"
  "$ROOT/scripts/setup.sh" >&2
  missing=()
  command -v jq >/dev/null || missing+=(jq)
  command -v h2load >/dev/null || missing+=(nghttp2-client)
  if ((${#missing[@]} > 0)); then
    log "installing ${missing[*]}"
    SUDO=()
    [[ $(id -u) == 0 ]] || SUDO=(sudo)
    "${SUDO[@]}" apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >&2
  fi
fi
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
if command -v h2load >/dev/null; then H2LOAD=${H2LOAD:-1}; else H2LOAD=0; fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench.XXXXXX")
PIDS=()
# Directories outside WORK to remove (section 8's tmpfs data), and Redis Clusters to stop (their
# directories, for deploy/redis/stop-cluster.sh).
CLEANUP_DIRS=()
CLEANUP_CLUSTERS=()
cleanup() {
  local pid dir
  for pid in "${PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  for dir in "${CLEANUP_CLUSTERS[@]}"; do
    "$ROOT/deploy/redis/stop-cluster.sh" "$dir" >&2 || true
  done
  # The CPU quota's cgroup of section 9 (LEASE_SERVER_CPU), empty once its server has exited.
  if declare -F release_server_cpu >/dev/null; then release_server_cpu; fi
  rm -rf "$WORK" "${CLEANUP_DIRS[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
TARGETS=(ratelimit_store_bench ratelimit_disk_usage ratelimit_loadgen ratelimit_null_server
         ratelimit_memory_server ratelimit_null_collector ratelimit_rlqs_bench ratelimit-server
         ratelimit_override_seed ratelimit_override_propagation ratelimit_lease_loadgen)
if [[ $SECTIONS == overrides ]]; then
  TARGETS=(ratelimit_loadgen ratelimit-server ratelimit_override_seed ratelimit_override_propagation)
elif [[ $SECTIONS == leases ]]; then
  TARGETS=(ratelimit_loadgen ratelimit_lease_loadgen ratelimit-server)
fi
if [[ $SKIP_BUILD != 1 ]]; then
  log "building ${TARGETS[*]} (Release) in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
    -DRATELIMIT_BUILD_BENCH=ON >&2
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" >&2
fi
BIN=$BUILD_DIR/bin
STORE_BENCH=$BIN/ratelimit_store_bench
DISK_USAGE=$BIN/ratelimit_disk_usage
LOADGEN=$BIN/ratelimit_loadgen
NULL_SERVER=$BIN/ratelimit_null_server
MEMORY_SERVER=$BIN/ratelimit_memory_server
NULL_COLLECTOR=$BIN/ratelimit_null_collector
RLQS_BENCH=$BIN/ratelimit_rlqs_bench
SERVER=$BIN/ratelimit-server
SEED=$BIN/ratelimit_override_seed
PROPAGATION=$BIN/ratelimit_override_propagation
LEASE_LOADGEN=$BIN/ratelimit_lease_loadgen
for target in "${TARGETS[@]}"; do
  [[ -x $BIN/$target ]] || die "$BIN/$target was not built"
done

# --- machine -----------------------------------------------------------------------------------
read_machine_facts

BUSY_BEFORE=$(busy_percent)
if ((BUSY_BEFORE > 10)); then
  log "warning: the machine is ${BUSY_BEFORE}% busy before the benchmarks start; figures will be low"
fi

set_pinning "server pinned to CPU 0, load generator to CPU 1 (taskset)"

if [[ $SECTIONS == all ]]; then
  # --- 1. in process ---------------------------------------------------------------------------
  log "store benchmark (about a minute)"
  # shellcheck disable=SC2086  # STORE_BENCH_FLAGS is a list of flags
  TMPDIR=$WORK "$STORE_BENCH" --benchmark_out="$WORK/store.json" --benchmark_out_format=json \
    $STORE_BENCH_FLAGS >&2

  # --- 2. disk usage ---------------------------------------------------------------------------
  log "disk usage, $DISK_KEYS keys"
  TMPDIR=$WORK "$DISK_USAGE" --keys="$DISK_KEYS" --json >"$WORK/disk.json"
  cat "$WORK/disk.json" >&2
fi

# --- 3. end to end -----------------------------------------------------------------------------
"$LOADGEN" --write_request="$WORK/request.bin"  # the body h2load sends

# The Envoy configuration of the ShouldRateLimit runs: domain "bench", descriptors d0..d9 (any
# value), each a fixed window of 4e9 requests per second, so that nothing is ever denied.
ENVOY_DIR=$WORK/envoy
mkdir -p "$ENVOY_DIR"
{
  echo "domain: bench"
  echo "descriptors:"
  for i in 0 1 2 3 4 5 6 7 8 9; do
    printf '  - key: d%d\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n' \
      "$i" 4000000000
  done
} >"$ENVOY_DIR/bench.yaml"
# Domain "bench_two": descriptor d0 under a rule of two limits (rate_limits), per second and per
# day, each far from denying.
{
  echo "domain: bench_two"
  echo "descriptors:"
  printf '  - key: d0\n    rate_limits:\n'
  printf '      - {unit: second, requests_per_unit: %d}\n' 4000000000
  printf '      - {unit: day, requests_per_unit: %d}\n' 4000000000
} >"$ENVOY_DIR/bench_two.yaml"

# start_server KIND LOGFILE [FLAG...]: starts ratelimit-server (KIND=real; the FLAGs are added to
# its command line), the in-memory-store variant (memory) or the null server (null) on
# 127.0.0.1, port 0; sets SERVER_PID and SERVER_PORT, and for ratelimit-server METRICS_PORT (its
# /metrics endpoint, also on port 0). ratelimit-server's data directory is new, or SERVER_DATA_DIR
# when set.
start_server() {
  local kind=$1 logfile=$2 dir
  dir=$(new_run_dir server)
  local port_file="$dir/port"
  shift 2
  METRICS_PORT=""
  if [[ $kind == real ]]; then
    local data="${SERVER_DATA_DIR:-$dir/data}" metrics_port_file="$dir/metrics-port"
    "${PIN_SERVER[@]}" "$SERVER" --listen=127.0.0.1:0 --data_dir="$data" \
      --port_file="$port_file" --metrics_listen=127.0.0.1:0 \
      --metrics_port_file="$metrics_port_file" --log_level=warning "$@" >"$logfile" 2>&1 &
  elif [[ $kind == memory ]]; then
    "${PIN_SERVER[@]}" "$MEMORY_SERVER" --listen=127.0.0.1:0 --port_file="$port_file" \
      >"$logfile" 2>&1 &
  else
    "${PIN_SERVER[@]}" "$NULL_SERVER" --listen=127.0.0.1:0 --port_file="$port_file" \
      >"$logfile" 2>&1 &
  fi
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s $port_file ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$logfile" >&2; die "$kind server exited"; }
    sleep 0.1
  done
  [[ -s $port_file ]] || die "$kind server did not report its port"
  SERVER_PORT=$(<"$port_file")
  if [[ $kind == real ]]; then
    # Written before the gRPC port file.
    [[ -s $metrics_port_file ]] || die "ratelimit-server did not report its metrics port"
    METRICS_PORT=$(<"$metrics_port_file")
  fi
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

# start_redis_cluster DIR LABEL: a 3+3 Redis Cluster on six free ports (and their bus ports) in
# DIR, stopped by cleanup (CLEANUP_CLUSTERS) unless the caller stops it first; sets CLUSTER_SEEDS
# (its --redis_address). LABEL names the section in the log.
start_redis_cluster() {
  local dir=$1 label=$2 ports
  read -r -a ports < <(free_port_pairs 6 10000)
  ((${#ports[@]} == 6)) || die "no six free ports for the Redis Cluster"
  CLEANUP_CLUSTERS+=("$dir")
  log "$label: starting a 3+3 Redis Cluster on ports ${ports[*]}"
  CLUSTER_SEEDS=$("$ROOT/deploy/redis/start-cluster.sh" "$dir" "${ports[@]}") ||
    die "the Redis Cluster did not start (deploy/redis/start-cluster.sh)"
}

# scrape_metrics OUT: GET /metrics of the running ratelimit-server (METRICS_PORT) into OUT. Bash's
# /dev/tcp, so that no HTTP client is needed.
scrape_metrics() {
  local out=$1 fd
  exec {fd}<>"/dev/tcp/127.0.0.1/$METRICS_PORT" || die "cannot connect to /metrics"
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&"$fd"
  cat <&"$fd" | tr -d '\r' >"$out"
  exec {fd}<&-
  grep -q '^HTTP/1.[01] 200' "$out" || die "GET /metrics failed: $(head -1 "$out")"
}

# run_load OUT KEYS [FLAG...]: the load generator against SERVER_PORT, with the FLAGs added (e.g.
# --api=envoy); its JSON result goes to OUT.
run_load() {
  local out=$1 keys=$2
  shift 2
  # In the background, so that a signal to this script is handled (and everything stopped) at
  # once rather than after the load generator finishes.
  # shellcheck disable=SC2086  # LOADGEN_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$LOADGEN" --target="127.0.0.1:$SERVER_PORT" --concurrency="$CONCURRENCY" \
    --duration="$DURATION" --warmup="$WARMUP" --keys="$keys" --json $LOADGEN_FLAGS "$@" >"$out" &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "load generator failed: $(cat "$out")"
  cat "$out" >&2
}

# run_h2load OUT: h2load (nghttp2's HTTP/2 load generator, much cheaper per request than a gRPC
# client) against SERVER_PORT with the load generator's hot-key request; "rps mean_us" to OUT.
# It checks HTTP statuses only; the same request body is checked for gRPC errors by run_load.
run_h2load() {
  local out=$1 streams=$((CONCURRENCY / 4 > 0 ? CONCURRENCY / 4 : 1))
  "${PIN_CLIENT[@]}" h2load --warm-up-time="$WARMUP" -D "$H2LOAD_DURATION" -c 4 -m "$streams" \
    -t 1 -d "$WORK/request.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$SERVER_PORT/ratelimit.v1.RateLimitService/Consume" >"$out.raw" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "h2load failed: $(cat "$out.raw")"
  grep -E 'finished in|^requests:|^time for request' "$out.raw" >&2
  h2load_summary "$out.raw" >"$out"
}

# section_only TITLE SECTION FILE: the report of a run of one section (SECTIONS=SECTION): a
# header naming the machine, the commit and the command, then FILE; then exits.
section_only() {
  echo "## Benchmark results ($1 section)"
  echo
  echo "Machine: $CPU_MODEL, $CPUS CPUs, ${MEM_GIB} GiB RAM, $(uname -sr). Commit $COMMIT," \
    "$(date -u +%Y-%m-%d). Produced by \`SECTIONS=$2 scripts/bench.sh\`."
  if ((MAX_BUSY > 10)); then
    echo "Warning: other work kept the machine up to ${MAX_BUSY}% busy; figures are noisy."
  fi
  echo
  cat "$3"
  log "done"
  exit 0
}

# Other work on the machine skews the end-to-end figures most: look before every server.
MAX_BUSY=$BUSY_BEFORE
check_idle() {
  local busy
  busy=$(busy_percent)
  if ((busy > MAX_BUSY)); then MAX_BUSY=$busy; fi
  if ((busy > 10)); then log "warning: the machine is ${busy}% busy with other work"; fi
}

# --- 6. h2load: the server's own cost per request ---------------------------------------------
# h2load_target OUT PATH BODY: h2load with H2LOAD_FLAGS against SERVER_PORT, posting BODY (a
# gRPC-framed request) to PATH; "rps mean_us failed" to OUT.
h2load_target() {
  local out=$1 path=$2 body=$3
  # shellcheck disable=SC2086  # H2LOAD_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" h2load --warm-up-time="$WARMUP" -D "$H2LOAD_DURATION" $H2LOAD_FLAGS \
    -d "$body" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$SERVER_PORT$path" >"$out.raw" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "h2load failed: $(cat "$out.raw")"
  grep -E 'finished in|^requests:' "$out.raw" >&2
  h2load_summary "$out.raw" >"$out"
}

# h2load_checked OUT PATH BODY [LOADGEN FLAG...]: first (round 1 only) one second of the load
# generator with the same request, which checks every gRPC status (h2load sees HTTP statuses
# only), then h2load_target.
h2load_checked() {
  local out=$1 path=$2 body=$3
  shift 3
  if [[ $round == 1 ]]; then
    "${PIN_CLIENT[@]}" "$LOADGEN" --target="127.0.0.1:$SERVER_PORT" --concurrency=8 \
      --duration=1s --warmup=0s --keys=1 --json "$@" >"$out.check" ||
      die "load generator failed: $(cat "$out.check")"
    [[ $(jq -r .errors "$out.check") == 0 ]] || die "$path answered errors: $(cat "$out.check")"
  fi
  h2load_target "$out" "$path" "$body"
}

H2_TARGETS=(null consume envoy1 envoy3 envoy1x2)
if [[ $H2LOAD == 1 && ($SECTIONS == all || $SECTIONS == h2load) ]]; then
  "$LOADGEN" --api=envoy --descriptors=1 --write_request="$WORK/envoy1.bin"
  "$LOADGEN" --api=envoy --descriptors=3 --write_request="$WORK/envoy3.bin"
  "$LOADGEN" --api=envoy --descriptors=1 --domain=bench_two --write_request="$WORK/envoy1x2.bin"
  for ((round = 1; round <= H2LOAD_ROUNDS; round++)); do
    for ((j = 0; j < ${#H2_TARGETS[@]}; j++)); do
      # Each round starts one target later than the previous one: none is always first.
      target=${H2_TARGETS[(j + round - 1) % ${#H2_TARGETS[@]}]}
      check_idle
      log "h2load, round $round/$H2LOAD_ROUNDS: $target"
      case $target in
        null)
          start_server null "$WORK/h2.null.log"
          h2load_checked "$WORK/h2s.null.$round" /ratelimit.v1.RateLimitService/Consume \
            "$WORK/request.bin"
          ;;
        consume)
          start_server real "$WORK/h2.consume.log"
          h2load_checked "$WORK/h2s.consume.$round" /ratelimit.v1.RateLimitService/Consume \
            "$WORK/request.bin"
          ;;
        envoy1x2)
          start_server real "$WORK/h2.$target.log" --envoy_config_dir="$ENVOY_DIR"
          h2load_checked "$WORK/h2s.$target.$round" \
            /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit "$WORK/envoy1x2.bin" \
            --api=envoy --descriptors=1 --domain=bench_two
          ;;
        envoy*)
          n=${target#envoy}
          start_server real "$WORK/h2.$target.log" --envoy_config_dir="$ENVOY_DIR"
          h2load_checked "$WORK/h2s.$target.$round" \
            /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit "$WORK/envoy$n.bin" \
            --api=envoy --descriptors="$n"
          ;;
      esac
      stop_server
    done
  done
  {
    echo "### h2load: the server's own cost per request"
    echo
    echo "h2load \`$H2LOAD_FLAGS\` (the same for every target), $H2LOAD_DURATION after $WARMUP" \
      "warm-up; $PINNING; $H2LOAD_ROUNDS rounds, the targets alternating (each round starts" \
      "with the next one). Empty handler: bench/null_server.cc (Consume answers at once)." \
      "Consume: ratelimit-server (RocksDB), one hot key. ShouldRateLimit: ratelimit-server with" \
      "\`--envoy_config_dir\` (section 4's configuration), 1 or 3 descriptors, one hot key each;" \
      "and 1 descriptor whose rule carries two limits (\`rate_limits\`: per second and per day)." \
      "Median requests/s of the rounds; ratio: median over the empty handler's median."
    echo
    echo "| target | requests/s (median) | rounds (min–max) | mean µs (median) | failed | vs empty handler |"
    echo "|---|---|---|---|---|---|"
    # h2_column TARGET N: column N of the target's result in every round, one a line.
    h2_column() {
      local r
      for ((r = 1; r <= H2LOAD_ROUNDS; r++)); do awk -v c="$2" '{ print $c }' "$WORK/h2s.$1.$r"; done
    }
    median() {
      sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
    }
    null_median=$(h2_column null 1 | median)
    for target in "${H2_TARGETS[@]}"; do
      case $target in
        null) label="empty handler" ;;
        consume) label="Consume, hot key (RocksDB)" ;;
        envoy1) label="ShouldRateLimit, 1 descriptor" ;;
        envoy3) label="ShouldRateLimit, 3 descriptors" ;;
        envoy1x2) label="ShouldRateLimit, 1 descriptor, a rule of two limits" ;;
      esac
      rps=$(h2_column "$target" 1 | median)
      mean=$(h2_column "$target" 2 | median)
      range=$(h2_column "$target" 1 | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 }
        END { printf "%.0f–%.0f", lo, hi }')
      failed=$(h2_column "$target" 3 | awk '{ f += $1 } END { print f + 0 }')
      awk -v l="$label" -v rps="$rps" -v m="$mean" -v r="$range" -v f="$failed" -v n="$null_median" \
        'BEGIN { printf "| %s | %.0f | %s | %.0f | %s | %.1f%% |\n", l, rps, r, m, f, 100 * rps / n }'
    done
    echo
  } >"$WORK/h2load.md"
  cat "$WORK/h2load.md" >&2
fi
if [[ $SECTIONS == h2load ]]; then
  [[ $H2LOAD == 1 ]] || die "h2load is not installed (apt-get install nghttp2-client)"
  section_only "h2load" h2load "$WORK/h2load.md"
fi

# --- 8. runtime overrides ---------------------------------------------------------------------
if [[ $SECTIONS == overrides || ($SECTIONS == all && $H2LOAD == 1) ]]; then
  [[ $H2LOAD == 1 ]] || die "h2load is not installed (apt-get install nghttp2-client)"
  # shellcheck source=scripts/bench-overrides.sh
  source "$ROOT/scripts/bench-overrides.sh"
  overrides_section >"$WORK/overrides.md"
  cat "$WORK/overrides.md" >&2
fi
if [[ $SECTIONS == overrides ]]; then
  section_only "overrides" overrides "$WORK/overrides.md"
fi

# --- 9. concurrency limits end to end --------------------------------------------------------
if [[ $SECTIONS == leases || $SECTIONS == all ]]; then
  # shellcheck source=scripts/bench-leases.sh
  source "$ROOT/scripts/bench-leases.sh"
  if [[ -n ${LEASE_AB_BUILD_DIR:-} ]]; then
    # shellcheck source=scripts/bench-ab.sh
    source "$ROOT/scripts/bench-ab.sh"
    leases_ab
    leases_ab_report >"$WORK/leases.md"
  else
    leases_section >"$WORK/leases.md"
  fi
  cat "$WORK/leases.md" >&2
fi
if [[ $SECTIONS == leases ]]; then
  section_only "leases" leases "$WORK/leases.md"
fi

# --- 7. RLQS against RLS v3 --------------------------------------------------------------------
# The domain "rlqs_bench": for each limit L of RLQS_LIMITS, a descriptor {tenant: l<L>} whose rule
# is a token bucket of L requests per second with a burst of L/10, and a quota_buckets rule
# matching {tenant: l<L>} with the same rate and burst.
RLQS_DIR=$WORK/rlqs-envoy
mkdir -p "$RLQS_DIR"
{
  echo "domain: rlqs_bench"
  echo "descriptors:"
  for limit in $RLQS_LIMITS; do
    printf '  - key: tenant\n    value: l%d\n    rate_limit: {unit: second, requests_per_unit: %d, algorithm: token_bucket, burst: %d}\n' \
      "$limit" "$limit" $((limit / 10 > 0 ? limit / 10 : 1))
  done
  echo "quota_buckets:"
  echo "  rules:"
  for limit in $RLQS_LIMITS; do
    printf '    - {name: l%d, match: {tenant: l%d}, requests_per_unit: %d, unit: second, burst: %d}\n' \
      "$limit" "$limit" "$limit" $((limit / 10 > 0 ? limit / 10 : 1))
  done
} >"$RLQS_DIR/rlqs_bench.yaml"
for limit in $RLQS_LIMITS; do
  check_idle
  log "RLQS against RLS v3: limit $limit/s, $RLQS_CLIENTS clients"
  start_server real "$WORK/server.rlqs.log" --rlqs --envoy_config_dir="$RLQS_DIR"
  # In the background, so that a signal to this script stops everything at once.
  # shellcheck disable=SC2086  # RLQS_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$RLQS_BENCH" --target="127.0.0.1:$SERVER_PORT" --server_pid="$SERVER_PID" \
    --limit="$limit" --value="l$limit" --clients="$RLQS_CLIENTS" --rlqs_duration="$RLQS_DURATION" \
    --rls_duration="$RLQS_DURATION" --idle_duration="$RLQS_DURATION" --json $RLQS_FLAGS \
    >"$WORK/rlqs.$limit.json" &
  pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "ratelimit_rlqs_bench failed: $(cat "$WORK/rlqs.$limit.json")"
  cat "$WORK/rlqs.$limit.json" >&2
  scrape_metrics "$WORK/rlqs.metrics"
  stop_server
  over=$(awk '$1 ~ /^ratelimit_rlqs_over_assignments_total/ { s += $2 } END { print s + 0 }' \
    "$WORK/rlqs.metrics")
  jq -c --argjson over "$over" '. + {server_over_assignments: $over}' "$WORK/rlqs.$limit.json" \
    >>"$WORK/rlqs.jsonl"
done
{
  echo "### RLQS against RLS v3: one global limit, the server's CPU per admitted request"
  echo
  echo "bench/rlqs_bench.cc, one run per limit: $RLQS_CLIENTS simulated Envoys on RLQS (each its" \
    "own channel and stream, reporting every second, enforcing the token bucket it is assigned)," \
    "then $RLQS_CLIENTS clients calling ShouldRateLimit once per request (calls in flight per" \
    "client: in the table)," \
    "both offering twice the limit in total (client i of N: 2 × limit × i / (1 + … + N))," \
    "$RLQS_DURATION measured each way (RLQS after 3 s, RLS after 1 s of warm-up); the same" \
    "ratelimit-server (\`--rlqs\`, RocksDB), whose domain gives the descriptor and the" \
    "quota_buckets rule the same rate (burst: a tenth of it); $PINNING. Server CPU: user + system" \
    "from /proc/PID/stat over each measured window (10 ms ticks). Over-assignment: RLQS's" \
    "admitted requests above the limit × the window (bound 5%); server: its" \
    "\`ratelimit_rlqs_over_assignments_total\`. Idle: the server's CPU over $RLQS_DURATION" \
    "with no client, before the two ways (its background work, included in both ways' CPU)."
  echo
  echo "| limit/s | way | offered/s | admitted/s | of the limit | server CPU s | server CPU µs per admitted | RLQS / RLS v3 | RLQS over-assignment |"
  echo "|---|---|---|---|---|---|---|---|---|"
  jq -r '
    def row(way; w): "| \(.limit | round) | \(way) | \(w.offered_per_s | round) | " +
      "\(w.admitted_per_s | round) | \(w.admitted_per_s / .limit * 1000 | round / 10)% | " +
      "\(w.server_cpu_s) | \(w.cpu_us_per_admitted * 10000 | round / 10000) |";
    row("RLQS"; .rlqs) + " \(.cpu_per_admitted_ratio * 100000 | round / 1000)% | " +
      "\(.rlqs_over_assignment_percent * 100 | round / 100)% (server: " +
      "\(.server_over_assignments)) |",
    row("RLS v3 ShouldRateLimit, \(.rls_in_flight) in flight per client"; .rls) + " | |",
    "| \(.limit | round) | idle (no client) | | | | \(.idle_server_cpu_s) | | | |"' "$WORK/rlqs.jsonl"
  echo
} >"$WORK/rlqs.md"
cat "$WORK/rlqs.md" >&2
if [[ $SECTIONS == rlqs ]]; then
  section_only "RLQS" rlqs "$WORK/rlqs.md"
fi

for ((round = 1; round <= ROUNDS; round++)); do
  check_idle
  log "end to end, round $round/$ROUNDS: null server"
  start_server null "$WORK/null.log"
  run_load "$WORK/e2e.null.$round.json" 1
  if [[ $H2LOAD == 1 ]]; then run_h2load "$WORK/h2.null.$round"; fi
  stop_server
  if [[ $H2LOAD == 1 ]]; then
    check_idle
    log "end to end, round $round/$ROUNDS: rate-limit service on the in-memory store (h2load)"
    start_server memory "$WORK/memory.log"
    run_h2load "$WORK/h2.memory.$round"
    stop_server
  fi
  check_idle
  log "end to end, round $round/$ROUNDS: ratelimit-server, hot key, then 1M keys"
  start_server real "$WORK/server.log"
  run_load "$WORK/e2e.hot.$round.json" 1
  run_load "$WORK/e2e.1m.$round.json" 1000000
  if [[ $H2LOAD == 1 ]]; then run_h2load "$WORK/h2.real.$round"; fi
  stop_server
  check_idle
  log "end to end, round $round/$ROUNDS: ratelimit-server, Envoy API, 1 then 3 descriptors"
  start_server real "$WORK/server.envoy.log" --envoy_config_dir="$ENVOY_DIR"
  run_load "$WORK/e2e.envoy1.$round.json" 1 --api=envoy --descriptors=1
  run_load "$WORK/e2e.envoy3.$round.json" 1 --api=envoy --descriptors=3
  stop_server
done

# --- 5. the cost of tracing ----------------------------------------------------------------------
# start_collector: the null OTLP collector on 127.0.0.1, port 0, pinned with the load generator;
# sets COLLECTOR_PID, COLLECTOR_PORT and COLLECTOR_COUNT (where it writes "spans calls" at exit).
start_collector() {
  local dir
  dir=$(new_run_dir collector)
  local port_file="$dir/port"
  COLLECTOR_COUNT="$dir/count"
  "${PIN_CLIENT[@]}" "$NULL_COLLECTOR" --listen=127.0.0.1:0 --port_file="$port_file" \
    --count_file="$COLLECTOR_COUNT" >>"$WORK/collector.log" 2>&1 &
  COLLECTOR_PID=$!
  PIDS+=("$COLLECTOR_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s $port_file ]] && break
    kill -0 "$COLLECTOR_PID" 2>/dev/null || { cat "$WORK/collector.log" >&2; die "collector exited"; }
    sleep 0.1
  done
  [[ -s $port_file ]] || die "the collector did not report its port"
  COLLECTOR_PORT=$(<"$port_file")
}

# stop_collector: stops it (after the server, which flushes its spans at SIGTERM); sets
# COLLECTOR_SPANS and COLLECTOR_CALLS to the spans and Export calls it received, and
# COLLECTOR_CPU to the CPU seconds it used (taken from CPU 1, the load generator's).
stop_collector() {
  local stat
  read -r -a stat <"/proc/$COLLECTOR_PID/stat"  # fields 14, 15: utime, stime in clock ticks
  COLLECTOR_CPU=$(awk -v u="${stat[13]}" -v s="${stat[14]}" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.2f", (u + s) / hz }')
  kill -TERM "$COLLECTOR_PID" 2>/dev/null || true
  wait "$COLLECTOR_PID" 2>/dev/null || true
  [[ -s $COLLECTOR_COUNT ]] || die "the collector did not write its count"
  read -r COLLECTOR_SPANS COLLECTOR_CALLS <"$COLLECTOR_COUNT"
}

# metric_value SAMPLE FILE: the value of the sample written exactly SAMPLE (name and labels) in
# the scraped FILE; null when absent.
metric_value() {
  awk -v n="$1" '$1 == n { v = $2 } END { print (v == "" ? "null" : v) }' "$2"
}

TRACE_MODES=(off 0.01 1)
for ((round = 1; round <= TRACE_ROUNDS; round++)); do
  for ((j = 0; j < ${#TRACE_MODES[@]}; j++)); do
    # Each round starts one setting later than the previous one: no setting is always first.
    mode=${TRACE_MODES[(j + round - 1) % ${#TRACE_MODES[@]}]}
    check_idle
    log "tracing, round $round/$TRACE_ROUNDS: ratelimit-server, hot key, tracing $mode"
    start_collector
    trace_flags=()
    if [[ $mode != off ]]; then
      trace_flags=(--otel_endpoint="127.0.0.1:$COLLECTOR_PORT" --otel_sample_ratio="$mode")
    fi
    start_server real "$WORK/server.trace.log" "${trace_flags[@]}"
    if [[ $H2LOAD == 1 ]]; then
      # h2load first (its calls are traced and counted too): the server's own cost, which the
      # gRPC load generator, bound by its CPU, shows only in part.
      h2load_target "$WORK/trace.h2" /ratelimit.v1.RateLimitService/Consume "$WORK/request.bin"
      read -r h2_rps _ h2_failed <"$WORK/trace.h2"
      jq -n -c --arg mode "$mode" --argjson round "$round" --argjson rps "$h2_rps" \
        --argjson failed "${h2_failed:-0}" '{mode: $mode, round: $round, rps: $rps, failed: $failed}' \
        >>"$WORK/trace.h2.jsonl"
    fi
    run_load "$WORK/trace.load.json" 1
    scrape_metrics "$WORK/trace.metrics"
    stop_server
    stop_collector
    spans=$COLLECTOR_SPANS
    rpcs=$(metric_value 'ratelimit_rpcs_total{method="Consume",code="OK"}' "$WORK/trace.metrics")
    dropped=$(metric_value ratelimit_trace_spans_dropped_total "$WORK/trace.metrics")
    log "collector: $spans spans in $COLLECTOR_CALLS Export calls; server: $rpcs Consume RPCs," \
      "$dropped spans dropped; collector CPU ${COLLECTOR_CPU}s"
    jq -c --arg mode "$mode" --argjson round "$round" --argjson spans "$spans" \
      --argjson rpcs "$rpcs" --argjson dropped "$dropped" --argjson cpu "$COLLECTOR_CPU" \
      '. + {mode: $mode, round: $round, spans: $spans, rpcs: $rpcs, dropped: $dropped,
            collector_cpu_s: $cpu}' \
      "$WORK/trace.load.json" >>"$WORK/trace.jsonl"
  done
done

BUSY_NOTE=""
if ((MAX_BUSY > 10)); then
  BUSY_NOTE=" Warning: other work kept the machine up to ${MAX_BUSY}% busy between runs;"
  BUSY_NOTE+=" figures are low and noisy."
fi

# --- summary -----------------------------------------------------------------------------------
fmt_k() {
  awk -v v="$1" 'BEGIN { if (v >= 1e6) printf "%.2fM", v / 1e6;
                         else if (v >= 1e3) printf "%.1fk", v / 1e3; else printf "%.0f", v }'
}
met() { awk -v v="$1" -v t="$2" 'BEGIN { print (v >= t ? "met" : "not met") }'; }

echo "## Benchmark results"
echo
echo "Machine: $CPU_MODEL, $CPUS CPUs, ${MEM_GIB} GiB RAM, $(uname -sr). Commit $COMMIT," \
  "$(date -u +%Y-%m-%d). Produced by \`scripts/bench.sh\`.$BUSY_NOTE"
echo
echo "### In process: \`Limiter::Evaluate\` (Consume), Google Benchmark"
echo
echo "bench/store_bench.cc. Every call is allowed and writes (capacity 1e12, refill 1 token/hour)."
echo "1M keys: pre-populated (each consumed once before timing), visited in a shuffled order."
echo "Latency is per call, all threads' samples merged. sync=true runs for about 1 s."
echo "Cases: Consume, one decision per call, answered once in the WAL; ConsumeAsync64, each thread"
echo "keeps 64 decisions outstanding (Limiter::EvaluateAsync, as the server's handlers call the"
echo "store; each is answered once in the WAL); Batch100, one call of 100 decisions (a call's"
echo "latency is the whole batch's)."
echo
echo "| case | store | keys | threads | decisions/s | p50 µs | p99 µs |"
echo "|---|---|---|---|---|---|---|"
jq -r '.benchmarks[] | select(.run_type == "iteration") |
  [.name, .threads, .items_per_second, .p50_us, .p99_us, (.error_message // "")] | @tsv' \
  "$WORK/store.json" |
  while IFS=$'\t' read -r name threads ips p50 p99 err; do
    case $name in
      */rocksdb_sync/*) store="RocksDB, sync=true (fsync)" ;;
      */rocksdb_nocache/*) store="RocksDB, no state cache" ;;
      */rocksdb/*) store="RocksDB (WAL, no fsync)" ;;
      */memory/*) store="in-memory" ;;
      *) store=$name ;;
    esac
    case $name in
      *hot_key*) keys="one hot key" ;;
      *1M_keys*) keys="1M distinct" ;;
      *) keys="?" ;;
    esac
    if [[ -n $err ]]; then
      echo "| ${name%%/*} | $store | $keys | $threads | error: $err | | |"
    else
      printf '| %s | %s | %s | %s | %s | %.2f | %.2f |\n' "${name%%/*}" "$store" "$keys" \
        "$threads" "$(fmt_k "$ips")" "$p50" "$p99"
    fi
  done
# store_ips PATTERN: decisions/s of the first one-thread case whose name matches PATTERN.
store_ips() {
  jq -r --arg p "$1" '[.benchmarks[] | select(.run_type == "iteration" and (.name | test($p)) and
    .threads == 1) | .items_per_second][0] // 0' "$WORK/store.json"
}
TARGET_IPS=$(store_ips 'Consume/rocksdb/hot_key')
echo
echo "Target ≥ 300k decisions/s on RocksDB, one hot key, one thread: $(fmt_k "$TARGET_IPS")" \
  "($(met "$TARGET_IPS" 300000))."
ASYNC_IPS=$(store_ips '^ConsumeAsync64/rocksdb/hot_key')
BATCH_IPS=$(store_ips '^Batch100/rocksdb/hot_key')
echo
echo "Target ≥ 500k durable decisions/s on one thread without batching (ConsumeAsync64, RocksDB," \
  "hot key): $(fmt_k "$ASYNC_IPS") ($(met "$ASYNC_IPS" 500000))."
echo
echo "Target ≥ 1M durable decisions/s on one thread with batching (Batch100, RocksDB, hot key):" \
  "$(fmt_k "$BATCH_IPS") ($(met "$BATCH_IPS" 1000000))."
echo
echo "### Bytes on disk per idle key"
echo
jq -r '"bench/disk_usage.cc: \(.keys) keys written through the Limiter (one Consume each; " +
  "encoded key + value \(.payload_bytes_per_key) bytes), flushed and compacted; then its clock " +
  "is moved past every refill time and the store compacted again. Directory = every file of " +
  "the data directory (SSTs, WAL, MANIFEST...).\n\n" +
  "| | SST bytes/key | estimated states | directory bytes/key |\n|---|---|---|---|\n" +
  "| written, compacted | \(.sst_bytes_per_key_before_gc * 100 | round / 100) | " +
  "\(.estimated_states_before_gc) | \(.dir_bytes_before_gc / .keys * 10 | round / 10) |\n" +
  "| all refilled, compacted (GC) | \(.sst_bytes_per_key_after_gc * 100 | round / 100) | " +
  "\(.estimated_states_after_gc) | \(.dir_bytes_after_gc / .keys * 10 | round / 10) |"' \
  "$WORK/disk.json"
echo
echo "### End to end: Consume over gRPC on loopback"
echo
echo "bench/loadgen.cc (async gRPC C++ client; $CONCURRENCY calls in flight; $LOADGEN_FLAGS)," \
  "$DURATION measured after $WARMUP warm-up; $ROUNDS rounds, servers alternating; $PINNING." \
  "Null handler: bench/null_server.cc, the gRPC server set up as ratelimit-server's, whose" \
  "Consume answers at once. % of null: against the null server of the same round."
echo
echo "| server | keys | round | requests/s | p50 µs | p99 µs | errors | % of null |"
echo "|---|---|---|---|---|---|---|---|"
for ((round = 1; round <= ROUNDS; round++)); do
  null_rps=$(jq -r .rps "$WORK/e2e.null.$round.json")
  for kind in null hot 1m; do
    case $kind in
      null) label="null handler"; keys="one" ;;
      hot) label="ratelimit-server"; keys="one hot key" ;;
      1m) label="ratelimit-server"; keys="1M distinct" ;;
    esac
    jq -r --arg srv "$label" --arg k "$keys" --arg r "$round" --argjson base "$null_rps" \
      '"| \($srv) | \($k) | \($r) | \(.rps | round) | \(.p50_us) | \(.p99_us) | " +
       "\(.errors) | \(.rps / $base * 1000 | round / 10)% |"' "$WORK/e2e.$kind.$round.json"
  done
done
sum_rps() { cat "$@" | jq -s 'map(.rps) | add'; }
RATIO=$(awk -v a="$(sum_rps "$WORK"/e2e.hot.*.json)" -v b="$(sum_rps "$WORK"/e2e.null.*.json)" \
  'BEGIN { printf "%.1f", 100 * a / b }')
echo
echo "Target Consume ≥ 80% of the null handler's requests/s (hot key, rounds pooled):" \
  "$RATIO% ($(met "$RATIO" 80))."
if [[ $H2LOAD == 1 ]]; then
  echo
  echo "Cross-check with h2load (4 connections × $((CONCURRENCY / 4)) streams, same request, same" \
    "pinning): h2load costs far less CPU per request than a gRPC client, so here the server's" \
    "core is the bottleneck and the ratio is the server's own cost ratio. In-memory store: the" \
    "same ratelimit-server code (bench/memory_server.cc) on MemoryStateStore, to separate the" \
    "service's cost from RocksDB's. h2load reports mean latency only."
  echo
  echo "| server | round | requests/s | mean µs | failed | % of null |"
  echo "|---|---|---|---|---|---|"
  for ((round = 1; round <= ROUNDS; round++)); do
    read -r null_rps _ _ <"$WORK/h2.null.$round"
    for kind in null memory real; do
      case $kind in
        null) label="null handler" ;;
        memory) label="ratelimit-server code, in-memory store" ;;
        real) label="ratelimit-server (RocksDB)" ;;
      esac
      read -r rps mean failed <"$WORK/h2.$kind.$round"
      awk -v l="$label" -v r="$round" -v rps="$rps" -v m="$mean" -v f="$failed" -v n="$null_rps" \
        'BEGIN { printf "| %s | %s | %.0f | %.0f | %s | %.1f%% |\n", l, r, rps, m, f, 100 * rps / n }'
    done
  done
fi

echo
echo "### Envoy RLS v3: ShouldRateLimit over gRPC on loopback"
echo
echo "ratelimit-server with \`--envoy_config_dir\`: domain \`bench\`, descriptors d0..d9, each a" \
  "fixed window of 4e9 requests per \`second\` (nothing is denied). Each request has 1 or 3" \
  "descriptors, descriptor i = one entry {key: d<i>, value: hot} (one hot key per descriptor)," \
  "so 3 descriptors = a 3-limit all-or-nothing transaction. Same load generator" \
  "(\`--api=envoy --descriptors=N\`), $CONCURRENCY in flight, pinning and rounds as above; % of" \
  "v1: against v1 Consume (hot key) of the same round."
echo
echo "| API | descriptors/request | round | requests/s | p50 µs | p99 µs | errors | denied | % of v1 |"
echo "|---|---|---|---|---|---|---|---|---|"
for ((round = 1; round <= ROUNDS; round++)); do
  v1_rps=$(jq -r .rps "$WORK/e2e.hot.$round.json")
  for n in 1 3; do
    jq -r --arg r "$round" --argjson base "$v1_rps" \
      '"| ShouldRateLimit | \(.descriptors) | \($r) | \(.rps | round) | \(.p50_us) | \(.p99_us) | " +
       "\(.errors) | \(.denied) | \(.rps / $base * 1000 | round / 10)% |"' "$WORK/e2e.envoy$n.$round.json"
  done
done
echo
for n in 1 3; do
  RATIO=$(awk -v a="$(sum_rps "$WORK"/e2e.envoy$n.*.json)" -v b="$(sum_rps "$WORK"/e2e.hot.*.json)" \
    'BEGIN { printf "%.1f", 100 * a / b }')
  echo "ShouldRateLimit, $n descriptor(s), rounds pooled: $RATIO% of v1 Consume's requests/s."
  echo
done

if [[ $H2LOAD == 1 ]]; then cat "$WORK/h2load.md"; fi

echo "### Tracing: v1 Consume (hot key) with tracing off, sampling 1%, sampling 100%"
echo
echo "ratelimit-server with no \`--otel_endpoint\` (off), or \`--otel_endpoint=<null collector>" \
  "--otel_sample_ratio=0.01\` / \`=1\`. Collector: bench/null_collector.cc (OTLP/gRPC" \
  "TraceService/Export, counts and discards), pinned to CPU 1 with the load generator. Same" \
  "load generator, $CONCURRENCY in flight, $DURATION after $WARMUP warm-up; $TRACE_ROUNDS rounds," \
  "the three settings alternating (each round starts with the next one). RPCs: Consume calls" \
  "the server answered (warm-up included, from its /metrics, before SIGTERM); spans: received by" \
  "the collector (after the server flushed at SIGTERM); a sampled call makes 2 spans (SERVER +" \
  "store transaction); dropped: \`ratelimit_trace_spans_dropped_total\`; collector CPU: CPU" \
  "seconds the collector took from the load generator's CPU."
echo
echo "| tracing | round | requests/s | p50 µs | p99 µs | errors | RPCs | spans received | spans/RPC | spans dropped | collector CPU s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
jq -r -s 'sort_by(.round, ({"off": 0, "0.01": 1, "1": 2}[.mode])) | .[] |
  "| \(if .mode == "off" then "off" else "ratio \(.mode)" end) | \(.round) | \(.rps | round) | " +
  "\(.p50_us) | \(.p99_us) | \(.errors) | \(.rpcs) | \(.spans) | " +
  "\(if .rpcs > 0 then (.spans / .rpcs * 1000 | round / 1000) else "-" end) | " +
  "\(.dropped // "-") | \(.collector_cpu_s) |"' "$WORK/trace.jsonl"
echo
echo "Rounds pooled (requests/s: all requests over all rounds' time; p50/p99: mean of the rounds)." \
  "Overhead: how much lower the requests/s are, and how much higher p50 is, than with tracing off."
echo
echo "| tracing | requests/s | rounds' requests/s (min–max) | p50 µs | p99 µs | requests/s overhead vs off | p50 vs off | spans dropped |"
echo "|---|---|---|---|---|---|---|---|"
TRACE_POOL='def pool(m): map(select(.mode == m)) |
    {rps: ((map(.requests) | add) / (map(.seconds) | add)),
     min: (map(.rps) | min), max: (map(.rps) | max),
     p50: (map(.p50_us) | add / length), p99: (map(.p99_us) | add / length),
     dropped: (map(.dropped // 0) | add)};'
jq -r -s "$TRACE_POOL"'
  pool("off") as $off |
  ["off", "0.01", "1"][] as $m | pool($m) as $p |
  "| \(if $m == "off" then "off" else "ratio \($m)" end) | \($p.rps | round) | " +
  "\($p.min | round)–\($p.max | round) | " +
  "\($p.p50 * 10 | round / 10) | \($p.p99 * 10 | round / 10) | " +
  "\(if $m == "off" then "-" else "\((1 - $p.rps / $off.rps) * 1000 | round / 10)%" end) | " +
  "\(if $m == "off" then "-" else "\(($p.p50 / $off.p50 - 1) * 1000 | round / 10 |
      if . > 0 then "+\(.)" else "\(.)" end)%" end) | " +
  "\(if $m == "off" then "-" else $p.dropped end) |"' "$WORK/trace.jsonl"
echo
jq -r -s "$TRACE_POOL"'pool("off") |
  "Noise: with tracing off, the rounds'"'"' requests/s spread over \((.max / .min - 1) * 1000 | round / 10)%" +
  " (max/min − 1); an overhead well under that is not resolved by this run."' "$WORK/trace.jsonl"
if [[ $H2LOAD == 1 ]]; then
  echo
  echo "The same servers driven by h2load (\`$H2LOAD_FLAGS\`, $H2LOAD_DURATION, before the load" \
    "generator's run in each round; the collector on CPU 1 with it). h2load leaves CPU 1 room, so" \
    "the server's CPU is the bound and the overhead is the server's own."
  echo
  echo "| tracing | requests/s by round | mean | overhead vs off | failed |"
  echo "|---|---|---|---|---|"
  jq -r -s 'def pool(m): map(select(.mode == m)) | {all: (sort_by(.round) | map(.rps | round)),
      mean: (map(.rps) | add / length), failed: (map(.failed) | add)};
    pool("off") as $off | ["off", "0.01", "1"][] as $m | pool($m) as $p |
    "| \(if $m == "off" then "off" else "ratio \($m)" end) | \($p.all | map(tostring) | join(" / ")) | " +
    "\($p.mean | round) | " +
    "\(if $m == "off" then "-" else "\((1 - $p.mean / $off.mean) * 1000 | round / 10)%" end) | " +
    "\($p.failed) |"' "$WORK/trace.h2.jsonl"
fi
# --- 6. Batch of 100 ---------------------------------------------------------------------------
# Batch RPCs of BATCH_SIZE (100) Consume entries against ratelimit-server (RocksDB): the load
# generator (--batch, one hot key and a key per entry out of 1M) and h2load with the same Batch
# body (written by `ratelimit_loadgen --batch=N --write_request=FILE`). Decisions/s = entries
# answered per second. BATCH_CONCURRENCY (16) calls in flight; pinning as above. h2load also sends
# the same body with omit_receipts set on every entry (callers that never settle), and a body whose
# entries name a limit defined in the server's limits file (the same token bucket, no inline
# config: a smaller request and receipt), in each round.
BATCH_SIZE=${BATCH_SIZE:-100}
BATCH_CONCURRENCY=${BATCH_CONCURRENCY:-16}
"$LOADGEN" --batch="$BATCH_SIZE" --write_request="$WORK/batch.bin"
"$LOADGEN" --batch="$BATCH_SIZE" --omit_receipts --write_request="$WORK/batch.noreceipt.bin"
"$LOADGEN" --batch="$BATCH_SIZE" --name=bench_defined --inline_config=false \
  --write_request="$WORK/batch.defined.bin"
cat >"$WORK/batch.limits.yaml" <<'YAML'
limits:
  - name: bench_defined
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 1000000000000
YAML
run_batch_load() {
  local out=$1 keys=$2
  # shellcheck disable=SC2086  # LOADGEN_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$LOADGEN" --target="127.0.0.1:$SERVER_PORT" --batch="$BATCH_SIZE" \
    --concurrency="$BATCH_CONCURRENCY" --duration="$DURATION" --warmup="$WARMUP" --keys="$keys" \
    --json $LOADGEN_FLAGS >"$out" &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "load generator failed: $(cat "$out")"
  cat "$out" >&2
}
# run_h2load_batch OUT [BODY]: "calls/s mean_us failed" of h2load sending the Batch body.
run_h2load_batch() {
  local out=$1 body=${2:-$WORK/batch.bin}
  local streams=$((BATCH_CONCURRENCY / 4 > 0 ? BATCH_CONCURRENCY / 4 : 1))
  "${PIN_CLIENT[@]}" h2load --warm-up-time="$WARMUP" -D "$H2LOAD_DURATION" -c 4 -m "$streams" \
    -t 1 -d "$body" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$SERVER_PORT/ratelimit.v1.RateLimitService/Batch" >"$out.raw" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "h2load failed: $(cat "$out.raw")"
  grep -E 'finished in|^requests:|^time for request' "$out.raw" >&2
  h2load_summary "$out.raw" >"$out"
}
for ((round = 1; round <= ROUNDS; round++)); do
  check_idle
  log "batch of $BATCH_SIZE, round $round/$ROUNDS: ratelimit-server, hot key, 1M keys, h2load"
  start_server real "$WORK/server.batch.log" --limits_file="$WORK/batch.limits.yaml"
  run_batch_load "$WORK/batch.hot.$round.json" 1
  run_batch_load "$WORK/batch.1m.$round.json" 1000000
  if [[ $H2LOAD == 1 ]]; then
    run_h2load_batch "$WORK/h2.batch.$round"
    run_h2load_batch "$WORK/h2.batch.noreceipt.$round" "$WORK/batch.noreceipt.bin"
    # h2load checks HTTP statuses only: first make sure the defined limit's entries are answered
    # without entry errors.
    "$LOADGEN" --target="127.0.0.1:$SERVER_PORT" --batch="$BATCH_SIZE" --name=bench_defined \
      --inline_config=false --concurrency=1 --threads=1 --duration=1s --warmup=0s \
      --json >"$WORK/batch.defined.check.json" || die "load generator failed (defined limit)"
    jq -e '.errors == 0 and .entry_errors == 0 and .decisions > 0' \
      "$WORK/batch.defined.check.json" >/dev/null ||
      die "the defined-limit Batch body is refused: $(cat "$WORK/batch.defined.check.json")"
    run_h2load_batch "$WORK/h2.batch.defined.$round" "$WORK/batch.defined.bin"
  fi
  stop_server
done
echo
echo "### Batch of $BATCH_SIZE: Consume entries in one Batch RPC, decisions/s"
echo
echo "ratelimit-server (RocksDB). Load generator: \`ratelimit_loadgen --batch=$BATCH_SIZE" \
  "--concurrency=$BATCH_CONCURRENCY\` ($LOADGEN_FLAGS), hot key (every entry the same key) or a" \
  "key per entry out of 1M; h2load: 4 connections × $((BATCH_CONCURRENCY / 4)) streams, the" \
  "hot-key Batch body. Decisions/s = entries answered per second (calls/s × $BATCH_SIZE for" \
  "h2load, which checks HTTP statuses only; the load generator counts entries and their errors)." \
  "Same pinning, $DURATION ($H2LOAD_DURATION for h2load) after $WARMUP warm-up."
echo
# h2load_batch_row LABEL ROUND FILE: the table row of one h2load Batch run (FILE: "calls/s
# mean_us failed").
h2load_batch_row() {
  local rps mean failed
  read -r rps mean failed <"$3"
  awk -v l="$1" -v r="$2" -v rps="$rps" -v m="$mean" -v f="$failed" -v n="$BATCH_SIZE" \
    'BEGIN { printf "| %s | one hot key | %s | %.0f | %.0f | mean %.0f | | %s |\n",
             l, r, rps, rps * n, m, f }'
}
# h2load_batch_mean PREFIX: decisions/s of the h2load Batch runs PREFIX.<round>, rounds' mean.
h2load_batch_mean() {
  local r
  for ((r = 1; r <= ROUNDS; r++)); do cat "$1.$r"; done |
    awk -v n="$BATCH_SIZE" '{ s += $1 * n; c++ } END { printf "%.0f", s / c }'
}
echo "| client | keys | round | calls/s | decisions/s | p50 µs (call) | p99 µs (call) | errors |"
echo "|---|---|---|---|---|---|---|---|"
for ((round = 1; round <= ROUNDS; round++)); do
  for kind in hot 1m; do
    if [[ $kind == hot ]]; then keys="one hot key"; else keys="1M distinct"; fi
    jq -r --arg k "$keys" --arg r "$round" \
      '"| loadgen | \($k) | \($r) | \(.rps | round) | \(.decisions_per_s | round) | " +
       "\(.p50_us) | \(.p99_us) | \(.errors + .entry_errors) |"' "$WORK/batch.$kind.$round.json"
  done
  if [[ $H2LOAD == 1 ]]; then
    h2load_batch_row h2load "$round" "$WORK/h2.batch.$round"
    h2load_batch_row "h2load, omit_receipts" "$round" "$WORK/h2.batch.noreceipt.$round"
    h2load_batch_row "h2load, defined limit" "$round" "$WORK/h2.batch.defined.$round"
  fi
done
BATCH_DPS=$(cat "$WORK"/batch.hot.*.json | jq -s 'map(.decisions_per_s) | add / length')
if [[ $H2LOAD == 1 ]]; then
  BATCH_DPS=$(h2load_batch_mean "$WORK/h2.batch")
  BATCH_BY="h2load, rounds' mean"
else
  BATCH_BY="load generator, rounds' mean"
fi
echo
echo "Target Batch of $BATCH_SIZE ≥ 1M decisions/s end to end (hot key, $BATCH_BY):" \
  "$(fmt_k "$BATCH_DPS") ($(met "$BATCH_DPS" 1000000))."
if [[ $H2LOAD == 1 ]]; then
  QUIET_DPS=$(h2load_batch_mean "$WORK/h2.batch.noreceipt")
  echo "The same with omit_receipts on every entry (callers that never settle):" \
    "$(fmt_k "$QUIET_DPS") ($(met "$QUIET_DPS" 1000000))."
  DEFINED_DPS=$(h2load_batch_mean "$WORK/h2.batch.defined")
  echo "The same naming a limit defined in the server's limits file instead of an inline config:" \
    "$(fmt_k "$DEFINED_DPS") ($(met "$DEFINED_DPS" 1000000))."
fi
echo
cat "$WORK/rlqs.md"
if [[ -s $WORK/overrides.md ]]; then cat "$WORK/overrides.md"; fi
cat "$WORK/leases.md"
log "done"
