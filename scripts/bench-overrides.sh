# Section 8 of scripts/bench.sh, runtime overrides (sourced by it, not run): the functions below
# use its settings and helpers (WORK, BIN, PIDS, CLEANUP_DIRS, PIN_SERVER, PIN_CLIENT, log, die,
# check_idle, start_server, stop_server, start_redis_cluster, h2load_checked, scrape_metrics).
#
# overrides_section prints two markdown sections on stdout:
#   - v1 Consume of one named limit ("ovr", the limits file's, key "hot") driven by h2load against
#     ratelimit-server on data directories holding 0, 1,000 and 100,000 overrides of that limit
#     (bench/override_seed.cc: half exact keys, half patterns, none matching "hot"), and 100,000
#     of which one pattern matches "hot" (the decision then uses it); OVERRIDE_ROUNDS rounds
#     alternating the directories, medians, each one's ratio to none; the server's VmRSS after
#     each run. The directories are on tmpfs (OVERRIDE_TMPDIR): every override is a synced write.
#   - the time from SetOverride's answer on one server to the first decision of another that uses
#     the change (bench/override_propagation.cc): two ratelimit-server on a local Redis Cluster
#     (deploy/redis/start-cluster.sh, free ports), OVERRIDE_CHANGES changes on the empty store,
#     idle and with OVERRIDE_LOAD_RPS Consume calls per second on the second server; then
#     OVERRIDE_HEAVY_CHANGES changes, idle, with 100,000 overrides in the store (every change makes
#     each server reload them all). Without redis-server, the same tool against one server on the
#     100,000-override RocksDB directory instead (OVERRIDE_HEAVY_CHANGES changes, idle and under
#     load): how soon the server that made a change decides with it.
# Environment (defaults): OVERRIDE_ROUNDS (H2LOAD_ROUNDS), OVERRIDE_CHANGES (100),
#   OVERRIDE_HEAVY_CHANGES (20), OVERRIDE_LOAD_RPS (1000), OVERRIDE_TMPDIR (/dev/shm).

OVERRIDE_ROUNDS=${OVERRIDE_ROUNDS:-$H2LOAD_ROUNDS}
OVERRIDE_CHANGES=${OVERRIDE_CHANGES:-100}
OVERRIDE_HEAVY_CHANGES=${OVERRIDE_HEAVY_CHANGES:-20}
OVERRIDE_LOAD_RPS=${OVERRIDE_LOAD_RPS:-1000}
OVERRIDE_TMPDIR=${OVERRIDE_TMPDIR:-/dev/shm}
# The data directories: overrides present (":hot": one pattern matches the hot key).
OVERRIDE_CASES=(0 1000 100000 100000:hot)
OVERRIDE_LIMIT=ovr

# overrides_prepare: the limits file (one token bucket of 4e9 per second: nothing is denied), the
# admin token, and one seeded data directory per case under a new directory of OVERRIDE_TMPDIR.
overrides_prepare() {
  OVR_DIR=$(mktemp -d "$OVERRIDE_TMPDIR/ratelimit-bench-overrides.XXXXXX")
  CLEANUP_DIRS+=("$OVR_DIR")
  OVR_LIMITS=$WORK/overrides-limits.yaml
  printf 'limits:\n  - {name: %s, kind: token_bucket, rate: 4000000000, period: 1s}\n' \
    "$OVERRIDE_LIMIT" >"$OVR_LIMITS"
  OVR_TOKEN=$WORK/overrides-admin-token
  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$OVR_TOKEN")
  local case n match
  for case in "${OVERRIDE_CASES[@]}"; do
    n=${case%%:*}
    match=()
    [[ $case == *:hot ]] && match=(--match=hot)
    log "overrides: seeding $n overrides (${match[*]:-no match}) on $OVERRIDE_TMPDIR"
    "$SEED" --dir="$OVR_DIR/$case" --name="$OVERRIDE_LIMIT" --overrides="$n" "${match[@]}" --json \
      >"$WORK/ovr-seed.$case.json" || die "seeding $case failed"
    cat "$WORK/ovr-seed.$case.json" >&2
  done
  "$LOADGEN" --name="$OVERRIDE_LIMIT" --inline_config=false --write_request="$WORK/ovr-request.bin"
}

# ovr_metric SAMPLE: the value of the sample written exactly SAMPLE (name and labels) in the last
# scrape ($WORK/ovr.metrics), as an integer; 0 when absent.
ovr_metric() {
  awk -v n="$1" '$1 == n { v = $2 } END { printf "%.0f\n", v + 0 }' "$WORK/ovr.metrics"
}

# overrides_throughput: OVERRIDE_ROUNDS rounds of h2load against a server on each directory; per
# round and case "rps mean_us failed" in $WORK/ovr-h2.CASE.ROUND and "rss_kib in_force decided"
# in $WORK/ovr-srv.CASE.ROUND (VmRSS after the run; the ratelimit_overrides gauge; decisions that
# used an override).
overrides_throughput() {
  local round j case rss in_force decided
  for ((round = 1; round <= OVERRIDE_ROUNDS; round++)); do
    for ((j = 0; j < ${#OVERRIDE_CASES[@]}; j++)); do
      # Each round starts one case later than the previous one: none is always first.
      case=${OVERRIDE_CASES[(j + round - 1) % ${#OVERRIDE_CASES[@]}]}
      check_idle
      log "overrides, round $round/$OVERRIDE_ROUNDS: Consume with $case overrides present"
      SERVER_DATA_DIR=$OVR_DIR/$case start_server real "$WORK/ovr.$case.log" \
        --limits_file="$OVR_LIMITS"
      # h2load_checked checks every gRPC status in round 1 (the variable `round` is its).
      h2load_checked "$WORK/ovr-h2.$case.$round" /ratelimit.v1.RateLimitService/Consume \
        "$WORK/ovr-request.bin" --name="$OVERRIDE_LIMIT" --inline_config=false
      rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SERVER_PID/status")
      scrape_metrics "$WORK/ovr.metrics"
      stop_server
      in_force=$(ovr_metric 'ratelimit_overrides{source="limits_file"}')
      decided=$(ovr_metric "ratelimit_override_decisions_total{limit=\"$OVERRIDE_LIMIT\"}")
      ((in_force == ${case%%:*})) ||
        die "the server on $case held $in_force overrides in force, not ${case%%:*}"
      if [[ $case == *:hot ]]; then
        [[ $decided != 0 ]] || die "no decision used the override matching the hot key"
      else
        [[ $decided == 0 ]] || die "$decided decisions used an override on $case"
      fi
      echo "$rss $in_force $decided" >"$WORK/ovr-srv.$case.$round"
    done
  done
}

# run_propagation OUT A B FLAG...: the propagation tool (JSON to OUT); false, with its output
# in OUT, when it fails.
run_propagation() {
  local out=$1 a=$2 b=$3
  shift 3
  "${PIN_CLIENT[@]}" "$PROPAGATION" --a="$a" --b="$b" --name="$OVERRIDE_LIMIT" \
    --admin_token_file="$OVR_TOKEN" --json "$@" >"$out" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid"
}

# overrides_propagation: idle and under load; one JSON line per run in $WORK/ovr-prop.jsonl, with
# the store and the servers measured.
overrides_propagation() {
  local a_pid a b_pid b load present loads changes
  : >"$WORK/ovr-prop.jsonl"
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    start_redis_cluster "$WORK/ovr-cluster" overrides
    OVR_SEEDS=$CLUSTER_SEEDS
    # Twice: on the empty store, idle and under load; then with 100,000 overrides written
    # beforehand (the servers stopped meanwhile, and started on them), idle.
    for present in 0 100000; do
      if ((present > 0)); then
        log "overrides: seeding $present overrides into the Redis Cluster"
        "$SEED" --redis_address="$OVR_SEEDS" --name="$OVERRIDE_LIMIT" --overrides="$present" \
          --json >"$WORK/ovr-seed.redis.json" || die "seeding the Redis Cluster failed"
        cat "$WORK/ovr-seed.redis.json" >&2
      fi
      start_server real "$WORK/ovr.redis-a.log" --store=redis --redis_address="$OVR_SEEDS" \
        --limits_file="$OVR_LIMITS" --admin_token_file="$OVR_TOKEN"
      a_pid=$SERVER_PID a=127.0.0.1:$SERVER_PORT
      start_server real "$WORK/ovr.redis-b.log" --store=redis --redis_address="$OVR_SEEDS" \
        --limits_file="$OVR_LIMITS" --admin_token_file="$OVR_TOKEN"
      b_pid=$SERVER_PID b=127.0.0.1:$SERVER_PORT
      loads=(0 "$OVERRIDE_LOAD_RPS")
      changes=$OVERRIDE_CHANGES
      if ((present > 0)); then loads=(0) changes=$OVERRIDE_HEAVY_CHANGES; fi
      for load in "${loads[@]}"; do
        check_idle
        log "overrides: propagation A -> B on Redis, $present present, $changes changes, load $load/s"
        run_propagation "$WORK/ovr-prop.json" "$a" "$b" --load_rps="$load" --changes="$changes" ||
          die "ratelimit_override_propagation failed: $(cat "$WORK/ovr-prop.json")"
        cat "$WORK/ovr-prop.json" >&2
        jq -c --arg present "$present" \
          '. + {store: "Redis Cluster (3+3), \($present | tonumber) overrides present", servers: "A → B"}' \
          "$WORK/ovr-prop.json" >>"$WORK/ovr-prop.jsonl"
      done
      SERVER_PID=$a_pid stop_server
      SERVER_PID=$b_pid stop_server
    done
    return 0
  fi
  log "redis-server is not installed: measuring one RocksDB server instead"
  SERVER_DATA_DIR=$OVR_DIR/100000 start_server real "$WORK/ovr.single.log" \
    --limits_file="$OVR_LIMITS" --admin_token_file="$OVR_TOKEN"
  a=127.0.0.1:$SERVER_PORT
  for load in 0 "$OVERRIDE_LOAD_RPS"; do
    check_idle
    log "overrides: apply latency on one server (100,000 overrides), load $load/s"
    run_propagation "$WORK/ovr-prop.json" "$a" "$a" --load_rps="$load" \
      --changes="$OVERRIDE_HEAVY_CHANGES" ||
      die "ratelimit_override_propagation failed: $(cat "$WORK/ovr-prop.json")"
    cat "$WORK/ovr-prop.json" >&2
    jq -c '. + {store: "RocksDB, 100,000 overrides present", servers: "A → A (one server)"}' \
      "$WORK/ovr-prop.json" >>"$WORK/ovr-prop.jsonl"
  done
  stop_server
}

# overrides_report: the markdown of both measurements.
overrides_report() {
  local case n label rps mean range failed rss base_rps base_rss seeded
  ovr_column() {  # ovr_column FILE_PREFIX CASE N: column N of the case's files, one a line
    local r
    for ((r = 1; r <= OVERRIDE_ROUNDS; r++)); do awk -v c="$3" '{ print $c }' "$WORK/$1.$2.$r"; done
  }
  ovr_median() {
    sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
  }
  base_rps=$(ovr_column ovr-h2 0 1 | ovr_median)
  base_rss=$(ovr_column ovr-srv 0 1 | ovr_median)
  echo "### Runtime overrides: Consume with 0, 1,000 and 100,000 overrides present"
  echo
  echo "v1 Consume of the limits file's limit \`$OVERRIDE_LIMIT\` (a token bucket of 4e9/s: nothing" \
    "is denied), key \`hot\`, driven by h2load \`$H2LOAD_FLAGS\` for $H2LOAD_DURATION after" \
    "$WARMUP warm-up; ratelimit-server (RocksDB) started on a data directory that holds N" \
    "overrides of that limit, written beforehand by bench/override_seed.cc through the store's" \
    "own \`OverrideStore::Modify\` (each with its audit entry): half exact keys \`k<i>\`, half" \
    "patterns \`tenant-<i>-*\`, \`*-<i>\`, \`p<i>-*-x\` in turn, none matching \`hot\` (the" \
    "decision looks the key up and finds none); in the last row one pattern, \`hot*\`, matches it" \
    "(the decision applies it). Data directories on tmpfs ($OVERRIDE_TMPDIR), the same for every" \
    "case; $PINNING; $OVERRIDE_ROUNDS rounds alternating the directories (each round starts with" \
    "the next one), medians. Every server reported the N overrides in force" \
    "(\`ratelimit_overrides\`) and, only in the last row, decisions using one" \
    "(\`ratelimit_override_decisions_total\`). RSS: the server's VmRSS after its run."
  echo
  echo "| overrides present | seeded in | requests/s (median) | rounds (min–max) | mean µs (median) | failed | vs none | server RSS MiB (median) | RSS vs none |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for case in "${OVERRIDE_CASES[@]}"; do
    n=${case%%:*}
    label=$(sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$n")
    [[ $case == *:hot ]] && label="$label, one matching the key"
    seeded=$(jq -r '"\(.seconds * 10 | round / 10) s"' "$WORK/ovr-seed.$case.json")
    rps=$(ovr_column ovr-h2 "$case" 1 | ovr_median)
    mean=$(ovr_column ovr-h2 "$case" 2 | ovr_median)
    range=$(ovr_column ovr-h2 "$case" 1 | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 }
      END { printf "%.0f–%.0f", lo, hi }')
    failed=$(ovr_column ovr-h2 "$case" 3 | awk '{ f += $1 } END { print f + 0 }')
    rss=$(ovr_column ovr-srv "$case" 1 | ovr_median)
    awk -v l="$label" -v s="$seeded" -v rps="$rps" -v m="$mean" -v r="$range" -v f="$failed" \
      -v b="$base_rps" -v rss="$rss" -v brss="$base_rss" \
      'BEGIN { printf "| %s | %s | %.0f | %s | %.0f | %s | %.1f%% | %.1f | %+.1f MiB |\n",
               l, s, rps, r, m, f, 100 * rps / b, rss / 1024, (rss - brss) / 1024 }'
  done
  rps=$(ovr_column ovr-h2 100000 1 | ovr_median)
  awk -v a="$rps" -v b="$base_rps" 'BEGIN { d = 100 * (1 - a / b)
    printf "\nTarget: with 100,000 overrides at most 5%% slower than with none: %.1f%% %s (%s).\n",
      (d < 0 ? -d : d), (d < 0 ? "faster" : "slower"), (d <= 5 ? "met" : "not met") }'
  echo
  echo "### Runtime overrides: the time for a change to reach a second replica"
  echo
  if jq -e 'select(.same_server)' "$WORK/ovr-prop.jsonl" >/dev/null; then
    echo "**Not the two-replica figure**: redis-server is not installed, and two servers cannot" \
      "share a RocksDB directory, so this is one server's apply latency:" \
      "SetOverride's answer to the first Check on the same server that uses the change (it" \
      "reloads its overrides before it answers; with 100,000 present that reload is in" \
      "SetOverride's own time). Install redis-server for the two-replica figure."
    echo
  fi
  echo "bench/override_propagation.cc: changes one at a time, each a SetOverride on A (limit" \
    "\`$OVERRIDE_LIMIT\`, key \`prop-<i>\`, a capacity of its own) after a random pause of up to" \
    "250 ms, while a Check of that key on B every 2 ms (from the moment the SetOverride is sent)" \
    "waits for an answer naming the override with that capacity. From A's answer: to that" \
    "Check's answer (within one poll of the truth; negative when B applied the change before A" \
    "answered). From sending: from the SetOverride's sending to the same answer. Each server" \
    "reads the store's override version every 250 ms and, when it changed, reads the changes" \
    "since its own version and applies them to its index (a full load only when the store's" \
    "history no longer reaches back; the server that made the change applies it before it" \
    "answers). Background load: Consume calls on B (key" \
    "\`load\`) from 8 threads, each one call at a time, paced at the rate asked (fewer are" \
    "answered when calls stall); both servers on CPU 0, the tool on CPU 1."
  echo
  echo "| store | servers | background load | changes | from A's answer p50 / p90 / p99 / max ms | from sending p50 / p99 ms | SetOverride p50 / p99 ms | Checks per change |"
  echo "|---|---|---|---|---|---|---|---|"
  jq -r 'def r: . * 10 | round / 10;
    "| \(.store) | \(.servers) | " +
    "\(if .load_rps_requested > 0 then "\(.load_rps_requested | round) Consume/s asked, " +
        "\(.load_rps | round) answered (\(.load_errors) errors)" else "none" end) | " +
    "\(.propagation.count) | **\(.propagation.p50_ms | r)** / \(.propagation.p90_ms | r) / " +
    "**\(.propagation.p99_ms | r)** / \(.propagation.max_ms | r) | " +
    "\(.from_send.p50_ms | r) / \(.from_send.p99_ms | r) | " +
    "\(.set_override.p50_ms | r) / \(.set_override.p99_ms | r) | \(.polls_per_change | r) |"' \
    "$WORK/ovr-prop.jsonl"
  echo
}

# overrides_section: everything above; the markdown on stdout.
overrides_section() {
  overrides_prepare
  overrides_throughput
  overrides_propagation
  overrides_report
}
