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
# decisions).
# Environment (defaults): LEASE_ROUNDS (3), LEASE_KEYS (10000: the many-keys case).

LEASE_ROUNDS=${LEASE_ROUNDS:-3}
LEASE_KEYS=${LEASE_KEYS:-10000}

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

leases_section() {
  local targets=(consume1 pairs1 "consume$LEASE_KEYS" "pairs$LEASE_KEYS") round j target
  check_idle
  start_server real "$WORK/server.leases.log"
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    for ((j = 0; j < ${#targets[@]}; j++)); do
      target=${targets[(j + round - 1) % ${#targets[@]}]}
      log "leases, round $round/$LEASE_ROUNDS: $target"
      case $target in
        consume*) run_load "$WORK/lease.$target.$round.json" "${target#consume}" ;;
        pairs*) run_lease_load "$WORK/lease.$target.$round.json" "${target#pairs}" ;;
      esac
    done
  done
  stop_server
  # lease_median TARGET FIELD: the median over the rounds of FIELD of TARGET's results.
  lease_median() {
    cat "$WORK"/lease."$1".*.json | jq -s --arg f "$2" \
      'map(.[$f]) | sort | if length % 2 == 1 then .[length / 2 | floor]
                           else (.[length / 2 - 1] + .[length / 2]) / 2 end'
  }
  echo "### Concurrency limits end to end: acquire+release pairs beside Consume (RocksDB)"
  echo
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
  echo "Target: a pair at least half of Consume's requests/s on RocksDB: hot key" \
    "${LEASE_RATIOS[0]} ($(awk -v r="${LEASE_RATIOS[0]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }')), $LEASE_KEYS keys" \
    "${LEASE_RATIOS[1]} ($(awk -v r="${LEASE_RATIOS[1]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }'))."
  echo
}
LEASE_RATIOS=()
