# Section 9's build comparison (sourced by scripts/bench.sh when LEASE_AB_BUILD_DIR is set, in
# place of section 9's own runs): the same load on two servers at the same time, one of this build
# and one of the build in LEASE_AB_BUILD_DIR (its bin/ratelimit-server), so that a change of one
# build's cost per call shows as the ratio of their rates, measured under the same conditions.
# Both servers run on RocksDB, on the server's CPU, each held to LEASE_SERVER_CPU of a core
# (required: the quota makes each server, not the load generators, the limit of its rate); each
# round starts two new servers, the two builds taking the two places (the first server started
# and the second) in turn, since two servers sharing a core under quotas are not always alike.
# Uses section 9's helpers (limit_server_cpu, release_server_cpu, run_lease_load) and bench.sh's
# (start_server, run_load, log, die, check_idle).
# Environment (defaults): LEASE_AB_LOAD (pairs: acquire+release pairs as section 9 makes them;
# consume: Consume as section 3 does), LEASE_AB_KEYS (1: the hot key), LEASE_AB_ENV (empty:
# assignments such as NAME=value put in the environment of the other build's server, for a
# comparison of one build under two settings), LEASE_ROUNDS and LEASE_DURATION as in section 9.
# Results: $WORK/ab.ROUND.this.json and $WORK/ab.ROUND.other.json; the report on stdout.

LEASE_AB_LOAD=${LEASE_AB_LOAD:-pairs}
LEASE_AB_KEYS=${LEASE_AB_KEYS:-1}
LEASE_AB_ENV=${LEASE_AB_ENV:-}

# ab_rate JSON: the load's rate in calls per second (a pair is two calls).
ab_rate() {
  jq -r 'if .pairs_per_s != null then .pairs_per_s * 2 else .rps end' "$1"
}

# start_other_server LOGFILE: start_server with the other build's server, LEASE_AB_ENV in its
# environment (SERVER and PIN_SERVER are this function's own for the call: bash's locals are seen
# by the functions it calls and end with it).
start_other_server() {
  local env_words=()
  read -r -a env_words <<<"$LEASE_AB_ENV"
  # shellcheck disable=SC2034  # start_server runs it
  local SERVER="$LEASE_AB_BUILD_DIR/bin/ratelimit-server"
  local -a PIN_SERVER=(env "${env_words[@]}" "${PIN_SERVER[@]}")
  start_server real "$1"
}

leases_ab() {
  [[ -n $LEASE_SERVER_CPU ]] || die "LEASE_AB_BUILD_DIR needs LEASE_SERVER_CPU (each server's share)"
  [[ $LEASE_AB_LOAD == pairs || $LEASE_AB_LOAD == consume ]] ||
    die "LEASE_AB_LOAD must be pairs or consume"
  [[ -x $LEASE_AB_BUILD_DIR/bin/ratelimit-server ]] ||
    die "LEASE_AB_BUILD_DIR: $LEASE_AB_BUILD_DIR/bin/ratelimit-server is not there"
  local round place pids ports builds loads
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    check_idle
    pids=() ports=() builds=() loads=()
    for place in 0 1; do
      # This build first in odd rounds, second in even ones.
      if (((round + place) % 2 == 1)); then builds+=(this); else builds+=(other); fi
      if [[ ${builds[place]} == this ]]; then
        start_server real "$WORK/server.ab.$round.this.log"
      else
        start_other_server "$WORK/server.ab.$round.other.log"
      fi
      limit_server_cpu "$SERVER_PID"
      pids+=("$SERVER_PID") ports+=("$SERVER_PORT")
    done
    log "build comparison, round $round/$LEASE_ROUNDS: $LEASE_AB_LOAD on $LEASE_AB_KEYS key(s)," \
      "this build on server $(((round + 1) % 2)), the other on server $((round % 2))"
    for place in 0 1; do
      local out="$WORK/ab.$round.${builds[place]}.json"
      if [[ $LEASE_AB_LOAD == pairs ]]; then
        (SERVER_PORT=${ports[place]} run_lease_load "$out" "$LEASE_AB_KEYS") &
      else
        (SERVER_PORT=${ports[place]} DURATION=$LEASE_DURATION run_load "$out" "$LEASE_AB_KEYS") &
      fi
      loads+=("$!")
    done
    for place in 0 1; do wait "${loads[place]}" || die "a load of the build comparison failed"; done
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    release_server_cpu
  done
}

leases_ab_report() {
  local round this other ratios=()
  echo "### Build comparison: $LEASE_AB_LOAD on $LEASE_AB_KEYS key(s), side by side"
  echo
  echo "Two ratelimit-servers (RocksDB, default flags) at the same time, both on the server's" \
    "CPU and each held to $LEASE_SERVER_CPU of a core, under the same load ($CONCURRENCY calls" \
    "in flight, \`$LOADGEN_FLAGS\`, $LEASE_DURATION after $WARMUP warm-up): one of this build" \
    "($COMMIT), one of \`$LEASE_AB_BUILD_DIR\`${LEASE_AB_ENV:+ with \`$LEASE_AB_ENV\`}; the two" \
    "builds change places every round. A round's ratio is the other build's calls per second" \
    "over this build's (a pair is two calls)."
  echo
  echo "| round | this build calls/s | other build calls/s | other / this |"
  echo "|---|---|---|---|"
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    this=$(ab_rate "$WORK/ab.$round.this.json")
    other=$(ab_rate "$WORK/ab.$round.other.json")
    ratios+=("$(awk -v a="$this" -v b="$other" 'BEGIN { printf "%.4f", b / a }')")
    printf '| %d | %.0f | %.0f | %s |\n' "$round" "$this" "$other" "${ratios[-1]}"
  done
  echo
  printf '%s\n' "${ratios[@]}" | awk '{ s += $1; ss += $1 * $1; n++ }
    END {
      m = s / n
      se = n > 1 ? sqrt((ss - n * m * m) / (n - 1) / n) : 0
      printf "**Other / this: %.4f** (mean of %d rounds; standard error %.4f).\n", m, n, se
    }'
}
