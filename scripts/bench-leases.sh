# Section 9 of scripts/bench.sh, concurrency limits end to end (sourced by it, not run): the
# functions below use its settings and helpers (WORK, LOADGEN, LEASE_LOADGEN, PIDS, PIN_CLIENT,
# CONCURRENCY, DURATION, WARMUP, LOADGEN_FLAGS, log, die, check_idle, start_server, stop_server,
# run_load).
#
# leases_section prints one markdown section on stdout: against one ratelimit-server on RocksDB,
# v1 Consume (the load generator, exactly as section 3 drives it: CONCURRENCY calls in flight,
# LOADGEN_FLAGS, an inline token bucket nothing is denied by) and acquire+release pairs
# (bench/lease_loadgen.cc: the same slots, threads and channels, each slot an Acquire of one slot
# of an inline concurrency limit of 1e9 slots, then the Release of its lease), on one hot key and
# on 10,000 keys; LEASE_ROUNDS rounds alternating the four (each round starts one later), medians,
# and a pair's rate over Consume's (the issue's target: at least one half, a pair being two
# decisions). It also reports the server's CPU per decision and each side's share of its core:
# on 2 CPUs the load generator's core can be the limit before the server's.
# Environment (defaults): LEASE_ROUNDS (3), LEASE_KEYS (10000: the many-keys case),
# LEASE_SERVER_CPU (empty: the server has its core; a fraction such as 0.5: the server is held to
# that share of a core by a CPU quota, so that it, not the load generator, is the limit of every
# run and the rates compare the server's own costs; needs root and cgroup v1's cpu controller).

LEASE_ROUNDS=${LEASE_ROUNDS:-3}
LEASE_KEYS=${LEASE_KEYS:-10000}
LEASE_SERVER_CPU=${LEASE_SERVER_CPU:-}
LEASE_CGROUP=""

# limit_server_cpu: puts SERVER_PID in a new cgroup whose CPU quota is LEASE_SERVER_CPU of a core
# (10 ms periods); LEASE_CGROUP is its directory, removed by release_server_cpu.
limit_server_cpu() {
  local root=/sys/fs/cgroup/cpu
  [[ -w $root/cgroup.procs ]] || die "LEASE_SERVER_CPU needs root and cgroup v1's cpu controller at $root"
  LEASE_CGROUP="$root/ratelimit-bench.$$"
  mkdir -p "$LEASE_CGROUP"
  echo 10000 >"$LEASE_CGROUP/cpu.cfs_period_us"
  awk -v f="$LEASE_SERVER_CPU" 'BEGIN { if (!(f > 0 && f <= 1)) exit 1; printf "%d\n", f * 10000 }' \
    >"$LEASE_CGROUP/cpu.cfs_quota_us" || die "LEASE_SERVER_CPU must be in (0, 1]"
  echo "$SERVER_PID" >"$LEASE_CGROUP/cgroup.procs"
}

release_server_cpu() {
  [[ -n $LEASE_CGROUP ]] || return 0
  rmdir "$LEASE_CGROUP" 2>/dev/null || true
  LEASE_CGROUP=""
}

# run_lease_load OUT KEYS: the lease load generator against SERVER_PORT with the settings of
# run_load; its JSON result goes to OUT.
run_lease_load() {
  local out=$1 keys=$2
  # shellcheck disable=SC2086  # LOADGEN_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$LEASE_LOADGEN" --target="127.0.0.1:$SERVER_PORT" \
    --concurrency="$CONCURRENCY" --duration="$DURATION" --warmup="$WARMUP" --keys="$keys" --json \
    $LOADGEN_FLAGS >"$out" &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "lease load generator failed: $(cat "$out")"
  cat "$out" >&2
  [[ $(jq -r '.errors + .denied + .not_held' "$out") == 0 ]] ||
    die "lease pairs answered errors, refusals or NOT_HELD: $(cat "$out")"
}

# server_cpu_seconds: the user + system CPU seconds SERVER_PID has used.
server_cpu_seconds() {
  local stat
  read -ra stat <"/proc/$SERVER_PID/stat"
  awk -v u="${stat[13]}" -v s="${stat[14]}" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.3f", (u + s) / hz }'
}

# children_cpu: sets CHILDREN_CPU to the user + system CPU seconds of this shell's waited-for
# children (bash's `times`, second line): the load generators. Not called in a subshell, whose
# `times` would count only its own children.
children_cpu() {
  times >"$WORK/times"
  CHILDREN_CPU=$(awk 'NR == 2 {
    t = 0
    for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + substr(p[2], 1, length(p[2]) - 1) }
    printf "%.3f", t
  }' "$WORK/times")
}

leases_section() {
  local targets=(consume1 pairs1 "consume$LEASE_KEYS" "pairs$LEASE_KEYS") round j target
  local s0 c0 t0 s1 c1 t1
  check_idle
  start_server real "$WORK/server.leases.log"
  [[ -z $LEASE_SERVER_CPU ]] || limit_server_cpu
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    for ((j = 0; j < ${#targets[@]}; j++)); do
      target=${targets[(j + round - 1) % ${#targets[@]}]}
      log "leases, round $round/$LEASE_ROUNDS: $target"
      children_cpu
      s0=$(server_cpu_seconds) c0=$CHILDREN_CPU t0=$EPOCHREALTIME
      case $target in
        consume*) run_load "$WORK/lease.$target.$round.json" "${target#consume}" ;;
        pairs*) run_lease_load "$WORK/lease.$target.$round.json" "${target#pairs}" ;;
      esac
      children_cpu
      s1=$(server_cpu_seconds) c1=$CHILDREN_CPU t1=$EPOCHREALTIME
      # The share of a core each used over the run (warm-up included, at the same load).
      awk -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "{\"server\": %.3f, \"client\": %.3f}\n", (s1 - s0) / (t1 - t0), (c1 - c0) / (t1 - t0) }' \
        >"$WORK/cpu.$target.$round.json"
    done
  done
  stop_server
  release_server_cpu
  # lease_median TARGET FIELD: the median over the rounds of FIELD of TARGET's results.
  lease_median() {
    cat "$WORK"/"${3:-lease}"."$1".*.json | jq -s --arg f "$2" \
      'map(.[$f]) | sort | if length % 2 == 1 then .[length / 2 | floor]
                           else (.[length / 2 - 1] + .[length / 2]) / 2 end'
  }
  echo "### Concurrency limits end to end: acquire+release pairs beside Consume (RocksDB)"
  echo
  if [[ -n $LEASE_SERVER_CPU ]]; then
    echo "**The server held to $LEASE_SERVER_CPU of a core** by a CPU quota (10 ms periods): it is" \
      "the limit of every run, so the rates compare its own costs."
    echo
  fi
  echo "One ratelimit-server (RocksDB, default flags); $PINNING. Consume: the load generator" \
    "(bench/loadgen.cc) as in section 3, $CONCURRENCY calls in flight, \`$LOADGEN_FLAGS\`, an" \
    "inline token bucket nothing is denied by. Pairs: bench/lease_loadgen.cc with the same" \
    "slots, threads and channels; each slot acquires one slot of an inline concurrency limit" \
    "(1e9 slots, nothing refused) and releases the lease it got, so each slot has one call in" \
    "flight as for Consume. $DURATION after $WARMUP warm-up each; $LEASE_ROUNDS rounds" \
    "alternating the four runs; medians (per-round ratios: each round's pairs over the same" \
    "round's Consume)."
  echo
  echo "| keys | Consume requests/s | Consume p50 / p99 µs | pairs/s | pair p50 / p99 µs | pair / Consume (rounds) |"
  echo "|---|---|---|---|---|---|"
  local keys label c_rps c_p50 c_p99 p_rps p_p50 p_p99 ratios ratio
  for keys in 1 "$LEASE_KEYS"; do
    if [[ $keys == 1 ]]; then label="one hot key"; else label="$keys keys"; fi
    c_rps=$(lease_median "consume$keys" rps)
    c_p50=$(lease_median "consume$keys" p50_us)
    c_p99=$(lease_median "consume$keys" p99_us)
    p_rps=$(lease_median "pairs$keys" pairs_per_s)
    p_p50=$(lease_median "pairs$keys" p50_us)
    p_p99=$(lease_median "pairs$keys" p99_us)
    ratios=$(for ((round = 1; round <= LEASE_ROUNDS; round++)); do
      jq -n --slurpfile c "$WORK/lease.consume$keys.$round.json" \
        --slurpfile p "$WORK/lease.pairs$keys.$round.json" '$p[0].pairs_per_s / $c[0].rps'
    done | sort -g | awk '{ printf "%s%.2f", (NR > 1 ? ", " : ""), $1 }')
    ratio=$(awk -v p="$p_rps" -v c="$c_rps" 'BEGIN { printf "%.2f", p / c }')
    printf '| %s | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f | **%s** (%s) |\n' "$label" "$c_rps" \
      "$c_p50" "$c_p99" "$p_rps" "$p_p50" "$p_p99" "$ratio" "$ratios"
    LEASE_RATIOS+=("$ratio")
  done
  echo
  echo "Server CPU per decision (its core use over a run, warm-up included, divided by the" \
    "decisions per second; a pair is two decisions) and each side's share of its core, medians:" \
    "a side near 1.00 is the limit of that run."
  echo
  echo "| keys | server CPU per Consume µs | server CPU per lease call µs | server core (Consume / pairs) | load generator core (Consume / pairs) |"
  echo "|---|---|---|---|---|"
  local c_server p_server c_client p_client
  for keys in 1 "$LEASE_KEYS"; do
    if [[ $keys == 1 ]]; then label="one hot key"; else label="$keys keys"; fi
    c_rps=$(lease_median "consume$keys" rps)
    p_rps=$(lease_median "pairs$keys" pairs_per_s)
    c_server=$(lease_median "consume$keys" server cpu)
    p_server=$(lease_median "pairs$keys" server cpu)
    c_client=$(lease_median "consume$keys" client cpu)
    p_client=$(lease_median "pairs$keys" client cpu)
    awk -v l="$label" -v cr="$c_rps" -v pr="$p_rps" -v cs="$c_server" -v ps="$p_server" \
      -v cc="$c_client" -v pc="$p_client" 'BEGIN {
        printf "| %s | %.1f | %.1f | %.2f / %.2f | %.2f / %.2f |\n", l, cs / cr * 1e6,
          ps / (2 * pr) * 1e6, cs, ps, cc, pc }'
  done
  echo
  echo "Target: a pair at least half of Consume's requests/s on RocksDB: hot key" \
    "${LEASE_RATIOS[0]} ($(awk -v r="${LEASE_RATIOS[0]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }')), $LEASE_KEYS keys" \
    "${LEASE_RATIOS[1]} ($(awk -v r="${LEASE_RATIOS[1]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }'))."
  echo
}
LEASE_RATIOS=()
