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
#   6. The server's own cost per request (scripts/bench-h2load.sh; h2load, whose cost per
#      request is far below a gRPC client's, so the server's one core is the bottleneck): the
#      empty handler (bench/null_server.cc), v1 Consume on one hot key (ratelimit-server,
#      RocksDB), and Envoy's ShouldRateLimit with 1 and with 3 descriptors and with 1 descriptor
#      whose rule has two limits (rate_limits), every one with the same h2load flags
#      (H2LOAD_FLAGS), the server on CPU 0 and h2load on CPU 1; H2LOAD_ROUNDS rounds alternating
#      the targets, medians, and each target's ratio to the empty handler.
#   7. RLQS against RLS v3 (scripts/bench-rlqs.sh; bench/rlqs_bench.cc): one global limit held by
#      RLQS_CLIENTS simulated Envoys on the Rate Limit Quota Service (each its own stream, reporting
#      every second, enforcing its assigned token bucket, offering twice the limit in total with
#      unequal demands), then by as many clients calling ShouldRateLimit once per request at the
#      same demands; ratelimit-server started with --rlqs and a generated domain "rlqs_bench" whose
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
#   The summary (scripts/bench-summary.sh) prints every section's results as markdown.
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

# --- 6. h2load: the server's own cost per request (scripts/bench-h2load.sh) ---
# shellcheck source=scripts/bench-h2load.sh
source "$ROOT/scripts/bench-h2load.sh"

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

# --- 7. RLQS against RLS v3 (scripts/bench-rlqs.sh) ---
# shellcheck source=scripts/bench-rlqs.sh
source "$ROOT/scripts/bench-rlqs.sh"

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

# --- summary (scripts/bench-summary.sh) ---
# shellcheck source=scripts/bench-summary.sh
source "$ROOT/scripts/bench-summary.sh"

log "done"
