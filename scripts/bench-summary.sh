# The summary of scripts/bench.sh (sourced by it at its end, not run): prints every section's
# results as markdown on stdout from what the sections left in $WORK (store.json, disk.json, the
# end-to-end, Envoy, tracing and batch runs, and the h2load, RLQS, overrides and leases sections'
# markdown), with each target and whether it is met. Section 6's Batch of 100 is measured here,
# just before it is printed. It uses bench.sh's settings and helpers.

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
