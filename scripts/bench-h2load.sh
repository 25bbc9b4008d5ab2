# Section 6 of scripts/bench.sh, the server's own cost per request with h2load (sourced by it at
# its place, not run): defines h2load_target and h2load_checked, which sections 5, 6 and 8 use,
# and, when h2load is installed and the section is asked for, measures the targets of H2_TARGETS
# into $WORK/h2load.md. It uses bench.sh's settings and helpers (WORK, LOADGEN, PIN_CLIENT, PIDS,
# H2LOAD, H2LOAD_FLAGS, H2LOAD_ROUNDS, H2LOAD_DURATION, WARMUP, SECTIONS, log, die, check_idle,
# start_server, stop_server, h2load_summary, section_only).

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
