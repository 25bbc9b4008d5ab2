#!/usr/bin/env bash
# Measures the Redis store's figures for docs/performance.md and prints them as markdown on stdout;
# progress and raw output go to stderr.
#
# In one run: a Redis Cluster of 3 primaries and 3 replicas (deploy/redis/start-cluster.sh, in a
# temporary directory, on free ports; stopped at the end), one ratelimit-server on it
# (--store=redis) and one on RocksDB (the default store), both pinned to CPU 0, and the load
# generator (bench/loadgen.cc, v1 Consume, inline configs, nothing ever denied) pinned to CPU 1:
#   1. Closed loop, CONCURRENCY calls in flight, for each workload: one hot key; 1M random keys;
#      3 limits per request with keys in one slot (hash tag); 3 limits per request in different
#      slots. ROUNDS rounds, each alternating which server goes first; medians; the Redis
#      server's ratio to the RocksDB one.
#   2. The baseline users build by hand: a plain Lua token bucket (bench/token_bucket.lua:
#      HGET/HSET of tokens and timestamp, Redis TIME) driven directly with redis-benchmark
#      EVALSHA, CONCURRENCY connections, pinned to CPU 1: the hot key on the primary that owns
#      it, and 1M random keys over the whole cluster (--cluster).
#   3. Open loop at half of each server's peak (the median of 1), hot key and 1M keys: p50/p99
#      of calls started at a fixed rate, latency counted from when each call was due; beside it
#      how late the load generator's pacer woke and how many calls found every slot busy, and
#      the machine's floor: how late a thread sleeping until each due time wakes at the same
#      rate with no RPC (ratelimit_wake_probe).
#   4. If h2load is installed: the peaks of 1 again, for the workloads whose request is one fixed
#      body (the hot key: 1 limit; 3 limits in one slot; 3 limits in 3 slots), driven by h2load
#      with the flags scripts/bench.sh uses (H2LOAD_FLAGS), ROUNDS rounds alternating the servers,
#      with each process's CPU per request. The load generator is a gRPC C++ client: on CPU 1 it
#      costs about as much per call as the Redis primary does, so in 1 the Redis server's peak is
#      bounded by that one shared CPU, not by the server. h2load costs a fraction of that, which
#      leaves CPU 1 to the Redis nodes and measures what the server itself can do. (h2load sees
#      HTTP statuses only: in round 1 a second of the load generator with the same request checks
#      every gRPC status first.)
# The Redis nodes are not pinned (the machine may have only 2 CPUs): they share the CPUs with the
# server and the load generator, as they would share a small host.
#
# Usage: scripts/bench-redis.sh [> results.md]
# Environment (defaults): BUILD_DIR (build-bench), DURATION (10s), WARMUP (1s), CONCURRENCY (64),
#   ROUNDS (3), KEYS (1000000), LOADGEN_FLAGS (--threads=2 --channels=1), SKIP_BUILD (0),
#   BASELINE_REQUESTS (200000: redis-benchmark -n per run), H2LOAD (1 if h2load is installed),
#   H2LOAD_FLAGS (-c 8 -m 32 -t 1), H2LOAD_DURATION (5s), SECTIONS (all; or h2load: 4 only,
#   about 2 minutes once built).
# Needs redis-server, redis-cli, redis-benchmark (Debian: redis-server, redis-tools), jq, and
# taskset (util-linux) and h2load (nghttp2-client) if available. Takes about 12 minutes once
# built. Sends traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CONCURRENCY=${CONCURRENCY:-64}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-1000000}
LOADGEN_FLAGS=${LOADGEN_FLAGS:---threads=2 --channels=1}
SKIP_BUILD=${SKIP_BUILD:-0}
BASELINE_REQUESTS=${BASELINE_REQUESTS:-200000}
if command -v h2load >/dev/null; then H2LOAD=${H2LOAD:-1}; else H2LOAD=0; fi
H2LOAD_FLAGS=${H2LOAD_FLAGS:--c 8 -m 32 -t 1}
H2LOAD_DURATION=${H2LOAD_DURATION:-5s}
SECTIONS=${SECTIONS:-all}
[[ $SECTIONS == all || $SECTIONS == h2load ]] || { echo "SECTIONS must be all or h2load" >&2; exit 2; }

unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_TRACES_SAMPLER \
  OTEL_TRACES_SAMPLER_ARG

log() { printf '[bench-redis] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for tool in redis-server redis-cli redis-benchmark jq; do
  command -v "$tool" >/dev/null || die "$tool is required (apt-get install redis-server redis-tools jq)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench-redis.XXXXXX")
PIDS=()
CLUSTER_DIR=$WORK/cluster
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [[ -d $CLUSTER_DIR ]]; then "$ROOT/deploy/redis/stop-cluster.sh" "$CLUSTER_DIR" >&2 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
TARGETS=(ratelimit_loadgen ratelimit-server ratelimit_wake_probe)
if [[ $SKIP_BUILD != 1 ]]; then
  log "building ${TARGETS[*]} (Release) in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
    -DRATELIMIT_BUILD_BENCH=ON >&2
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" >&2
fi
LOADGEN=$BUILD_DIR/bin/ratelimit_loadgen
SERVER=$BUILD_DIR/bin/ratelimit-server
PROBE=$BUILD_DIR/bin/ratelimit_wake_probe
for bin in "$LOADGEN" "$SERVER" "$PROBE"; do [[ -x $bin ]] || die "$bin was not built"; done

# --- machine -----------------------------------------------------------------------------------
read_machine_facts
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')

MAX_BUSY=$(busy_percent)
check_idle() {
  local busy
  busy=$(busy_percent)
  if ((busy > MAX_BUSY)); then MAX_BUSY=$busy; fi
  if ((busy > 10)); then log "warning: the machine is ${busy}% busy with other work"; fi
}

set_pinning "servers pinned to CPU 0, load generators to CPU 1 (taskset); Redis nodes unpinned"

# --- the cluster -------------------------------------------------------------------------------
# Six ports p such that neither p nor its cluster bus port p + 10000 is listening.
listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
PORTS=()
base=$((20000 + RANDOM % 9000))
for ((p = base; ${#PORTS[@]} < 6 && p < base + 1000; p++)); do
  listening "$p" || listening "$((p + 10000))" || PORTS+=("$p")
done
((${#PORTS[@]} == 6)) || die "no six free ports near $base"
log "starting a 3+3 Redis Cluster on ports ${PORTS[*]}"
SEEDS=$("$ROOT/deploy/redis/start-cluster.sh" "$CLUSTER_DIR" "${PORTS[@]}")
log "cluster seeds: $SEEDS"

# Load the baseline's script on every node (replicas too: redis-benchmark may route there).
SHA=""
for port in "${PORTS[@]}"; do
  SHA=$(redis-cli -h 127.0.0.1 -p "$port" SCRIPT LOAD "$(cat "$ROOT/bench/token_bucket.lua")")
done
[[ $SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD failed: $SHA"

# --- the servers -------------------------------------------------------------------------------
# start_server NAME [FLAG...]: ratelimit-server on 127.0.0.1, port 0, pinned to CPU 0; sets
# PORT[NAME].
declare -A PORT SERVER_PID
start_server() {
  local name=$1 port_file="$WORK/port.$1"
  shift
  "${PIN_SERVER[@]}" "$SERVER" --listen=127.0.0.1:0 --data_dir="$WORK/data.$name" \
    --port_file="$port_file" --metrics_listen=127.0.0.1:0 --log_level=warning "$@" \
    >"$WORK/server.$name.log" 2>&1 &
  local pid=$! i
  PIDS+=("$pid")
  for ((i = 0; i < 100; i++)); do
    [[ -s $port_file ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/server.$name.log" >&2; die "$name server exited"; }
    sleep 0.1
  done
  [[ -s $port_file ]] || die "$name server did not report its port"
  PORT[$name]=$(<"$port_file")
  SERVER_PID[$name]=$pid
}
start_server rocksdb
start_server redis --store=redis --redis_address="$SEEDS"
log "servers: rocksdb on ${PORT[rocksdb]}, redis on ${PORT[redis]}"

# run_load OUT SERVER_NAME [FLAG...]: the load generator (JSON to OUT).
run_load() {
  local out=$1 name=$2
  shift 2
  # shellcheck disable=SC2086  # LOADGEN_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$LOADGEN" --target="127.0.0.1:${PORT[$name]}" --concurrency="$CONCURRENCY" \
    --duration="$DURATION" --warmup="$WARMUP" --json $LOADGEN_FLAGS "$@" >"$out" &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "load generator failed: $(cat "$out")"
  cat "$out" >&2
  [[ $(jq -r '.errors + .denied' "$out") == 0 ]] || die "errors or denials: $(cat "$out")"
}

# run_baseline OUT hot|random: redis-benchmark EVALSHA of the Lua token bucket ("rps p50_ms
# p99_ms" to OUT). Hot: one key, on the primary that owns it. Random: KEYS keys over the cluster.
run_baseline() {
  local out=$1 kind=$2 args raw="$WORK/raw.${1##*/}"
  if [[ $kind == hot ]]; then
    local slot owner
    slot=$(redis-cli -h 127.0.0.1 -p "${PORTS[0]}" CLUSTER KEYSLOT bench:hot)
    # CLUSTER NODES: "<id> <ip:port@bus> <flags> ... <slot or range>..."; the primary whose
    # ranges hold the slot.
    owner=$(redis-cli -h 127.0.0.1 -p "${PORTS[0]}" CLUSTER NODES | awk -v s="$slot" '
      $3 ~ /master/ { for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if (n == 1) r[2] = r[1]
        if (r[1] + 0 <= s && s <= r[2] + 0) { split($2, a, "[:@]"); print a[2]; exit } } }')
    [[ -n $owner ]] || die "no owner for slot $slot"
    args=(-p "$owner" EVALSHA "$SHA" 1 bench:hot 0.000277 1e12 1)
  else
    args=(--cluster -p "${PORTS[0]}" -r "$KEYS" EVALSHA "$SHA" 1 "bench:{tag}:__rand_int__"
          0.000277 1e12 1)
  fi
  "${PIN_CLIENT[@]}" redis-benchmark -h 127.0.0.1 -c "$CONCURRENCY" -n "$BASELINE_REQUESTS" --csv \
    "${args[@]}" >"$raw" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "redis-benchmark failed: $(cat "$raw")"
  tail -1 "$raw" >&2
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_..."
  tail -1 "$raw" | tr -d '"' | awk -F, '{ print $(NF - 6), $(NF - 3), $(NF - 1) }' >"$out"
}

# --- 1 and 2: peaks ----------------------------------------------------------------------------
WORKLOADS=(hot random same3 cross3)
declare -A WORKLOAD_FLAGS=(
  [hot]="--keys=1"
  [random]="--keys=$KEYS"
  [same3]="--keys=$KEYS --limits=3 --hash_tag"
  [cross3]="--keys=$KEYS --limits=3"
)
declare -A WORKLOAD_TEXT=(
  [hot]="1 limit, one hot key"
  [random]="1 limit, $KEYS random keys"
  [same3]="3 limits, one slot ({key}), $KEYS random keys"
  [cross3]="3 limits, 3 slots, $KEYS random keys"
)
SERVERS=(rocksdb redis)
if [[ $SECTIONS == h2load ]]; then
  [[ $H2LOAD == 1 ]] || die "h2load is not installed (apt-get install nghttp2-client)"
  ROUNDS_PEAK=0
else
  ROUNDS_PEAK=$ROUNDS
fi
for ((round = 1; round <= ROUNDS_PEAK; round++)); do
  for w in "${WORKLOADS[@]}"; do
    for ((j = 0; j < 2; j++)); do
      s=${SERVERS[(j + round - 1) % 2]}
      check_idle
      log "round $round/$ROUNDS: $w on $s"
      # shellcheck disable=SC2086  # the workload's flags are a list
      run_load "$WORK/peak.$w.$s.$round" "$s" ${WORKLOAD_FLAGS[$w]}
    done
  done
  for kind in hot random; do
    check_idle
    log "round $round/$ROUNDS: Lua token bucket, $kind (redis-benchmark)"
    run_baseline "$WORK/lua.$kind.$round" "$kind"
  done
done

# median FILES... FIELD: the median of a JSON field over the loadgen results.
median_json() {
  local field=$1
  shift
  jq -s "map(.$field) | sort | .[(length - 1) / 2 | floor]" "$@"
}
# median_col COLUMN FILES...: the median of a column of one-line files.
median_col() {
  local col=$1
  shift
  cat "$@" | awk -v c="$col" '{ print $c }' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

# --- 3: half of the peak, open loop ------------------------------------------------------------
for ((round = 1; round <= ROUNDS_PEAK; round++)); do
  for w in hot random; do
    for ((j = 0; j < 2; j++)); do
      s=${SERVERS[(j + round - 1) % 2]}
      peak=$(median_json rps "$WORK"/peak."$w"."$s".*)
      rate=$(awk -v p="$peak" 'BEGIN { printf "%.0f", p / 2 }')
      check_idle
      log "round $round/$ROUNDS: $w on $s at $rate/s (half of $peak)"
      # shellcheck disable=SC2086
      run_load "$WORK/half.$w.$s.$round" "$s" ${WORKLOAD_FLAGS[$w]} --rate="$rate"
      # The machine's own floor at that rate: a thread woken as the load generator's pacer is,
      # with no RPC.
      "${PIN_CLIENT[@]}" "$PROBE" --rate="$rate" --duration="$DURATION" --json \
        >"$WORK/probe.$w.$s.$round"
      cat "$WORK/probe.$w.$s.$round" >&2
    done
  done
done

# --- 4: peaks driven by h2load -----------------------------------------------------------------
H2_WORKLOADS=(hot same3 cross3)
declare -A H2_FLAGS=([hot]="" [same3]="--limits=3 --hash_tag" [cross3]="--limits=3")
declare -A H2_TEXT=(
  [hot]="1 limit, one hot key"
  [same3]="3 limits, one slot ({hot})"
  [cross3]="3 limits, 3 slots, one key each"
)
# cpu_ticks PID...: user + system clock ticks of each process, one line.
cpu_ticks() {
  local pid
  for pid in "$@"; do awk '{ printf "%d ", $14 + $15 }' "/proc/$pid/stat"; done
  echo
}
# run_h2load OUT SERVER_NAME BODY: h2load posting BODY (a framed Consume) to the server; to OUT
# "rps mean_us failed server_us_per_call nodes_us_per_call": CPU per call over the run of the
# server and of the six Redis nodes together.
run_h2load() {
  local out=$1 name=$2 body=$3 raw="$WORK/raw.${1##*/}" ticks_before ticks_after
  local -a watched=("${SERVER_PID[$name]}")
  local node
  for node in "$CLUSTER_DIR"/*/redis.pid; do watched+=("$(<"$node")"); done
  # shellcheck disable=SC2086  # H2LOAD_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" h2load -D "$H2LOAD_DURATION" $H2LOAD_FLAGS -d "$body" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:${PORT[$name]}/ratelimit.v1.RateLimitService/Consume" >"$raw" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  ticks_before=$(cpu_ticks "${watched[@]}")
  wait "$pid" || die "h2load failed: $(cat "$raw")"
  ticks_after=$(cpu_ticks "${watched[@]}")
  grep -E 'finished in|^requests:' "$raw" >&2
  local calls cpu
  calls=$(awk '/^requests:/ { print $6 }' "$raw")  # "requests: N total, N started, N done, ..."
  # The first is the server, the others the Redis nodes.
  cpu=$(awk -v before="$ticks_before" -v after="$ticks_after" -v hz="$(getconf CLK_TCK)" \
    -v calls="$calls" 'BEGIN {
      n = split(before, b, " "); split(after, a, " ")
      server = (a[1] - b[1]) / hz; nodes = 0
      for (i = 2; i <= n; i++) nodes += (a[i] - b[i]) / hz
      printf "%.2f %.2f", 1e6 * server / calls, 1e6 * nodes / calls }')
  echo "$(h2load_summary "$raw") $cpu" >"$out"
}
if [[ $H2LOAD == 1 ]]; then
  for w in "${H2_WORKLOADS[@]}"; do
    # shellcheck disable=SC2086
    "$LOADGEN" --write_request="$WORK/h2.$w.bin" ${H2_FLAGS[$w]}
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    for w in "${H2_WORKLOADS[@]}"; do
      for ((j = 0; j < 2; j++)); do
        s=${SERVERS[(j + round - 1) % 2]}
        check_idle
        if [[ $round == 1 ]]; then
          log "h2load: checking the $w request's gRPC statuses on $s with the load generator"
          # shellcheck disable=SC2086
          "${PIN_CLIENT[@]}" "$LOADGEN" --target="127.0.0.1:${PORT[$s]}" --concurrency=8 \
            --duration=1s --warmup=0s --keys=1 --json ${H2_FLAGS[$w]} >"$WORK/h2check.$w.$s" ||
            die "load generator failed: $(cat "$WORK/h2check.$w.$s")"
          [[ $(jq -r '.errors + .denied' "$WORK/h2check.$w.$s") == 0 ]] ||
            die "$w on $s answered errors or denials: $(cat "$WORK/h2check.$w.$s")"
        fi
        log "h2load, round $round/$ROUNDS: $w on $s"
        run_h2load "$WORK/h2peak.$w.$s.$round" "$s" "$WORK/h2.$w.bin"
        read -r _ _ failed _ _ <"$WORK/h2peak.$w.$s.$round"
        [[ $failed == 0 ]] || die "h2load: $failed requests failed ($w on $s)"
      done
    done
  done
fi

# --- report ------------------------------------------------------------------------------------
fmt() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
ms() { awk -v v="$1" 'BEGIN { printf "%.2f", v / 1000 }'; }
echo "### Redis Cluster store ($(date -u +%Y-%m-%d), commit $COMMIT)"
echo
if [[ $SECTIONS == all ]]; then
echo "$CPU_MODEL, $CPUS CPUs, $MEM_GIB GiB; Redis $REDIS_VERSION, 3 primaries + 3 replicas"
echo "(deploy/redis/redis.conf: AOF everysec), one ratelimit-server per store; $PINNING."
echo "Closed loop, $CONCURRENCY calls in flight, ${DURATION} per run after ${WARMUP}, medians of"
echo "$ROUNDS rounds alternating the servers; the CPUs were up to ${MAX_BUSY}% busy with other work"
echo "when a run started."
echo
echo "| Workload (v1 Consume) | RocksDB decisions/s | p50 / p99 ms | Redis Cluster decisions/s | p50 / p99 ms | Redis / RocksDB |"
echo "|---|---:|---:|---:|---:|---:|"
for w in "${WORKLOADS[@]}"; do
  r_rps=$(median_json rps "$WORK"/peak."$w".rocksdb.*)
  c_rps=$(median_json rps "$WORK"/peak."$w".redis.*)
  printf '| %s | %s | %s / %s | %s | %s / %s | %s%% |\n' "${WORKLOAD_TEXT[$w]}" \
    "$(fmt "$r_rps")" "$(ms "$(median_json p50_us "$WORK"/peak."$w".rocksdb.*)")" \
    "$(ms "$(median_json p99_us "$WORK"/peak."$w".rocksdb.*)")" "$(fmt "$c_rps")" \
    "$(ms "$(median_json p50_us "$WORK"/peak."$w".redis.*)")" \
    "$(ms "$(median_json p99_us "$WORK"/peak."$w".redis.*)")" \
    "$(awk -v a="$c_rps" -v b="$r_rps" 'BEGIN { printf "%.0f", 100 * a / b }')"
done
echo
echo "A decision here is one request (a 3-limit request decides its 3 limits at once)."
echo
echo "| Plain Lua token bucket (redis-benchmark EVALSHA, $CONCURRENCY connections) | decisions/s | p50 / p99 ms |"
echo "|---|---:|---:|"
for kind in hot random; do
  text="one hot key (its primary only)"
  [[ $kind == random ]] && text="$KEYS random keys (--cluster, every primary)"
  printf '| %s | %s | %s / %s |\n' "$text" "$(fmt "$(median_col 1 "$WORK"/lua."$kind".*)")" \
    "$(median_col 2 "$WORK"/lua."$kind".*)" "$(median_col 3 "$WORK"/lua."$kind".*)"
done
echo
echo "| Open loop at half the peak | server | rate/s | p50 ms | p99 ms | calls finding all $CONCURRENCY in flight | load generator woke late, p99 ms | machine floor: a thread woken at that rate, late p50 / p99 ms |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for w in hot random; do
  for s in rocksdb redis; do
    printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s |\n' "${WORKLOAD_TEXT[$w]}" "$s" \
      "$(fmt "$(median_json rate "$WORK"/half."$w"."$s".*)")" \
      "$(ms "$(median_json p50_us "$WORK"/half."$w"."$s".*)")" \
      "$(ms "$(median_json p99_us "$WORK"/half."$w"."$s".*)")" \
      "$(median_json slot_waits "$WORK"/half."$w"."$s".*)" \
      "$(ms "$(median_json pacer_late_p99_us "$WORK"/half."$w"."$s".*)")" \
      "$(ms "$(median_json p50_us "$WORK"/probe."$w"."$s".*)")" \
      "$(ms "$(median_json p99_us "$WORK"/probe."$w"."$s".*)")"
  done
done
echo
echo "Latency in the open loop counts from when a call was due, so a call started late counts its"
echo "lateness: late because every slot was busy (the server was behind), or because the load"
echo "generator's pacer woke late. The last column is the same wake-up with no RPC at all"
echo "(bench/wake_probe.cc): the part of the tail that belongs to the machine."
else
  echo "$CPU_MODEL, $CPUS CPUs, $MEM_GIB GiB; Redis $REDIS_VERSION, 3 primaries + 3 replicas;"
  echo "$PINNING."
fi
if [[ $H2LOAD == 1 ]]; then
  echo
  echo "| Workload (v1 Consume, h2load \`$H2LOAD_FLAGS\`, $H2LOAD_DURATION) | RocksDB decisions/s | mean ms | server µs CPU per call | Redis Cluster decisions/s | mean ms | server µs CPU per call | Redis nodes µs CPU per call | Redis / RocksDB |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for w in "${H2_WORKLOADS[@]}"; do
    r_rps=$(median_col 1 "$WORK"/h2peak."$w".rocksdb.*)
    c_rps=$(median_col 1 "$WORK"/h2peak."$w".redis.*)
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s%% |\n' "${H2_TEXT[$w]}" \
      "$(fmt "$r_rps")" "$(ms "$(median_col 2 "$WORK"/h2peak."$w".rocksdb.*)")" \
      "$(median_col 4 "$WORK"/h2peak."$w".rocksdb.*)" "$(fmt "$c_rps")" \
      "$(ms "$(median_col 2 "$WORK"/h2peak."$w".redis.*)")" \
      "$(median_col 4 "$WORK"/h2peak."$w".redis.*)" "$(median_col 5 "$WORK"/h2peak."$w".redis.*)" \
      "$(awk -v a="$c_rps" -v b="$r_rps" 'BEGIN { printf "%.0f", 100 * a / b }')"
  done
  echo
  echo "The same servers and cluster as the first table, driven by h2load instead of the load"
  echo "generator (medians of $ROUNDS rounds alternating the servers). Each request is one fixed body,"
  echo "so only the workloads on one key are here. CPU per call is from /proc over each run: the"
  echo "server's (on CPU 0) and the six Redis nodes' together (sharing CPU 1 with h2load)."
fi
