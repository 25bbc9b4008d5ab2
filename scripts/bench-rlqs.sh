# Section 7 of scripts/bench.sh, RLQS against RLS v3 (sourced by it at its place, not run):
# measures bench/rlqs_bench.cc's two ways into $WORK/rlqs.md. It uses bench.sh's settings and
# helpers (WORK, BIN, RLQS_LIMITS, RLQS_CLIENTS, RLQS_DURATION, RLQS_FLAGS, SECTIONS, log, die,
# check_idle, start_server, stop_server, section_only).

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
