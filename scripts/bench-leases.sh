# Section 9 of scripts/bench.sh, concurrency limits end to end (sourced by it, not run): the
# functions below use its settings and helpers (ROOT, WORK, LOADGEN, LEASE_LOADGEN, PIDS,
# PIN_CLIENT, CONCURRENCY, DURATION, WARMUP, LOADGEN_FLAGS, log, die, check_idle, start_server,
# stop_server, start_redis_cluster, run_load).
#
# leases_section prints one markdown section per store on stdout: against one ratelimit-server on
# RocksDB, then against one on a local Redis Cluster (--store=redis; 3 primaries and 3 replicas,
# deploy/redis/start-cluster.sh on free ports, as section 8 starts its own, stopped once measured),
# v1 Consume (the load generator, exactly as section 3 drives it: CONCURRENCY calls in flight,
# LOADGEN_FLAGS, an inline token bucket nothing is denied by) and acquire+release pairs
# (bench/lease_loadgen.cc: the same slots, threads and channels, each slot an Acquire of one slot
# of an inline concurrency limit of 1e9 slots, then the Release of its lease), on one hot key and
# on 10,000 keys; LEASE_ROUNDS rounds of the four, each key count's Consume and pairs run back to
# back in an order that alternates between rounds and key counts (so a drift of the machine's
# speed within a round falls on both sides alike), LEASE_DURATION each; medians, and a pair's rate
# over Consume's as the median of the rounds' ratios, each from two back-to-back runs (the
# issue's target, on RocksDB: at least one half, a pair being two decisions). It also reports the server's CPU per decision and each side's share of
# its core (and the Redis nodes' cores): on 2 CPUs the load generator's core can be the limit
# before the server's. Results: $WORK/lease.STORE.TARGET.ROUND.json, cores used:
# $WORK/cpu.STORE.TARGET.ROUND.json; LEASE_RATIOS: RocksDB's two ratios (hot key, LEASE_KEYS).
# Environment (defaults): LEASE_ROUNDS (3), LEASE_DURATION (DURATION: each run's length after its
# warm-up; shorter runs in more rounds put the two runs of a ratio closer together in time),
# LEASE_KEYS (10000: the many-keys case),
# LEASE_STORES ("rocksdb redis": the stores measured, either alone; redis needs redis-server and
# redis-cli), LEASE_SERVER_CPU (empty: the server has its core; a fraction such as 0.5: the
# server, on either store, is held to that share of a core by a CPU quota, so that it, not the
# load generator, is the limit of every run and the rates compare the server's own costs; needs
# root and cgroup v1's cpu controller; the Redis nodes are not held), LEASE_SIDE_BY_SIDE (0; 1: two
# servers on the store, both on the server's CPU and each held to LEASE_SERVER_CPU, which is then
# required; each run of Consume is made at the same time as the run of pairs it is compared with,
# one on each server, the servers swapping roles from run to run: a change in the machine's speed
# then falls on both figures of a ratio at once, where back to back it falls between them; the
# report adds each server's mean ratio over the rounds it ran the pairs in, since the two servers
# sharing a core under quotas are not always alike), LEASE_STREAM (1; 0: none; only side by side:
# stream pairs too, the lease load generator with --stream, its Acquire and Release as ops of one
# LeaseStream per channel: each key count of a round runs a second pair of loads at the same
# time, Consume on the same server and stream pairs on the one that ran the pairs, under the same
# conditions as the first; the report adds their table, their ratios beside the unary pairs' and
# their CPU; LEASE_STREAM_RATIOS: RocksDB's two stream ratios).

LEASE_ROUNDS=${LEASE_ROUNDS:-3}
LEASE_DURATION=${LEASE_DURATION:-$DURATION}
LEASE_KEYS=${LEASE_KEYS:-10000}
LEASE_STORES=${LEASE_STORES:-rocksdb redis}
LEASE_SERVER_CPU=${LEASE_SERVER_CPU:-}
LEASE_SIDE_BY_SIDE=${LEASE_SIDE_BY_SIDE:-0}
LEASE_STREAM=${LEASE_STREAM:-1}
LEASE_CGROUPS=()

# limit_server_cpu PID: puts PID in a new cgroup whose CPU quota is LEASE_SERVER_CPU of a core
# (10 ms periods); its directory is added to LEASE_CGROUPS, removed by release_server_cpu once
# the servers have exited.
limit_server_cpu() {
  local pid=$1 root=/sys/fs/cgroup/cpu dir
  [[ -w $root/cgroup.procs ]] || die "LEASE_SERVER_CPU needs root and cgroup v1's cpu controller at $root"
  dir="$root/ratelimit-bench.$$.$pid"
  mkdir -p "$dir"
  LEASE_CGROUPS+=("$dir")
  echo 10000 >"$dir/cpu.cfs_period_us"
  awk -v f="$LEASE_SERVER_CPU" 'BEGIN { if (!(f > 0 && f <= 1)) exit 1; printf "%d\n", f * 10000 }' \
    >"$dir/cpu.cfs_quota_us" || die "LEASE_SERVER_CPU must be in (0, 1]"
  echo "$pid" >"$dir/cgroup.procs"
}

release_server_cpu() {
  local dir
  for dir in "${LEASE_CGROUPS[@]}"; do rmdir "$dir" 2>/dev/null || true; done
  LEASE_CGROUPS=()
}

# run_lease_load OUT KEYS [FLAG...]: the lease load generator against SERVER_PORT with the
# settings of run_load, and the FLAGs (--stream: its stream pairs); its JSON result goes to OUT.
run_lease_load() {
  local out=$1 keys=$2
  shift 2
  # shellcheck disable=SC2086  # LOADGEN_FLAGS is a list of flags
  "${PIN_CLIENT[@]}" "$LEASE_LOADGEN" --target="127.0.0.1:$SERVER_PORT" \
    --concurrency="$CONCURRENCY" --duration="$LEASE_DURATION" --warmup="$WARMUP" --keys="$keys" \
    --json $LOADGEN_FLAGS "$@" >"$out" &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || die "lease load generator failed: $(cat "$out")"
  cat "$out" >&2
  [[ $(jq -r '.errors + .denied + .not_held' "$out") == 0 ]] ||
    die "lease pairs answered errors, refusals or NOT_HELD: $(cat "$out")"
}

# cpu_seconds PID...: the user + system CPU seconds the processes PID... have used (0 for none).
cpu_seconds() {
  local pid stat ticks=0
  for pid in "$@"; do
    read -ra stat <"/proc/$pid/stat"
    ticks=$((ticks + stat[13] + stat[14]))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", t / hz }'
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

# write_cores OUT S0 S1 C0 C1 R0 R1 T0 T1: the share of a core the server (S), the load generators
# (C) and the Redis nodes (R) used between times T0 and T1 (CPU seconds at each), as JSON in OUT
# (warm-up included, at the same load).
write_cores() {
  awk -v s0="$2" -v s1="$3" -v c0="$4" -v c1="$5" -v r0="$6" -v r1="$7" -v t0="$8" -v t1="$9" \
    'BEGIN { d = t1 - t0
      printf "{\"server\": %.3f, \"client\": %.3f, \"redis\": %.3f}\n",
        (s1 - s0) / d, (c1 - c0) / d, (r1 - r0) / d }' >"$1"
}

# leases_measure STORE: LEASE_ROUNDS rounds of the four runs against one ratelimit-server on STORE
# (rocksdb, or redis on a new Redis Cluster); each run's result in
# $WORK/lease.STORE.TARGET.ROUND.json and the cores the server, the load generator and the Redis
# nodes used in $WORK/cpu.STORE.TARGET.ROUND.json.
leases_measure() {
  local store=$1 targets round j target
  local flags=() redis_pids=() pidfile out s0 c0 r0 t0 s1 c1 r1 t1
  if [[ $store == redis ]]; then
    LEASE_CLUSTER=$WORK/lease-cluster
    start_redis_cluster "$LEASE_CLUSTER" leases
    flags=(--store=redis --redis_address="$CLUSTER_SEEDS")
    for pidfile in "$LEASE_CLUSTER"/*/redis.pid; do redis_pids+=("$(<"$pidfile")"); done
  fi
  check_idle
  if ((LEASE_SIDE_BY_SIDE)); then
    leases_side_by_side "$store" "${flags[@]}"
    release_server_cpu
    leases_stop_cluster "$store"
    return
  fi
  start_server real "$WORK/server.leases.$store.log" "${flags[@]}"
  [[ -z $LEASE_SERVER_CPU ]] || limit_server_cpu "$SERVER_PID"
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    # Consume then pairs on the hot key, pairs then Consume on many keys; the other way round in
    # the next round.
    if ((round % 2 == 1)); then
      targets=(consume1 pairs1 "pairs$LEASE_KEYS" "consume$LEASE_KEYS")
    else
      targets=(pairs1 consume1 "consume$LEASE_KEYS" "pairs$LEASE_KEYS")
    fi
    for ((j = 0; j < ${#targets[@]}; j++)); do
      target=${targets[j]}
      out=$WORK/lease.$store.$target.$round.json
      log "leases ($store), round $round/$LEASE_ROUNDS: $target"
      children_cpu
      s0=$(cpu_seconds "$SERVER_PID") c0=$CHILDREN_CPU r0=$(cpu_seconds "${redis_pids[@]}")
      t0=$EPOCHREALTIME
      case $target in
        consume*) DURATION=$LEASE_DURATION run_load "$out" "${target#consume}" ;;
        pairs*) run_lease_load "$out" "${target#pairs}" ;;
      esac
      children_cpu
      s1=$(cpu_seconds "$SERVER_PID") c1=$CHILDREN_CPU r1=$(cpu_seconds "${redis_pids[@]}")
      t1=$EPOCHREALTIME
      write_cores "$WORK/cpu.$store.$target.$round.json" "$s0" "$s1" "$c0" "$c1" "$r0" "$r1" "$t0" "$t1"
    done
  done
  stop_server
  release_server_cpu
  leases_stop_cluster "$store"
}

# leases_stop_cluster STORE: stops the Redis Cluster leases_measure started for STORE redis.
leases_stop_cluster() {
  [[ $1 == redis ]] || return 0
  # Idle nodes would still share the CPUs with the sections that follow.
  # shellcheck disable=SC2153  # ROOT is bench.sh's (not limit_server_cpu's root)
  "$ROOT/deploy/redis/stop-cluster.sh" "$LEASE_CLUSTER" >&2 ||
    log "warning: a node of the Redis Cluster did not stop"
}

# leases_side_by_side STORE FLAGS...: LEASE_SIDE_BY_SIDE's rounds: two servers on STORE (FLAGS),
# each held to LEASE_SERVER_CPU; in each round, for each key count, Consume against one and pairs
# against the other at the same time, the roles swapping between key counts and rounds. Results
# as leases_measure's; the load generators' core share is of both together.
#
# With LEASE_STREAM, each key count of a round has a second run of the same kind beside that one:
# Consume against the same server and stream pairs (the lease load generator with --stream)
# against the other, at the same time (targets streamconsumeKEYS and streampairsKEYS); the two
# runs of a key count go in an order that alternates between rounds (the unary pairs' run first
# in odd rounds). The stream pairs are not a third load beside the two: three load generators
# would share the one core the two share, and the unary pairs and Consume would run beside two
# loads instead of one, so that neither their figures nor the stream's would be measured as
# before. Run as a pair of their own, the stream pairs are measured under the unary pairs'
# conditions (two loads at a time, the same two servers and quotas, the same roles), and their
# ratio is to the Consume run made at the same time as they are.
leases_side_by_side() {
  local store=$1 round k keys i runs run
  shift
  [[ -n $LEASE_SERVER_CPU ]] || die "LEASE_SIDE_BY_SIDE needs LEASE_SERVER_CPU (each server's share)"
  local pids=() ports=()
  for i in 0 1; do
    start_server real "$WORK/server.leases.$store.$i.log" "$@"
    limit_server_cpu "$SERVER_PID"
    pids+=("$SERVER_PID") ports+=("$SERVER_PORT")
  done
  for ((round = 1; round <= LEASE_ROUNDS; round++)); do
    k=0
    for keys in 1 "$LEASE_KEYS"; do
      i=$(((round + k) % 2)) k=$((k + 1))
      runs=(pairs)
      if ((LEASE_STREAM)); then
        if ((round % 2 == 1)); then runs=(pairs stream); else runs=(stream pairs); fi
      fi
      for run in "${runs[@]}"; do
        if [[ $run == pairs ]]; then
          side_by_side_run "$store" "$round" "$keys" "$i" consume pairs
        else
          side_by_side_run "$store" "$round" "$keys" "$i" streamconsume streampairs --stream
        fi
      done
    done
  done
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}

# side_by_side_run STORE ROUND KEYS I CONSUME LEASE [FLAG...]: one run of leases_side_by_side:
# Consume against server I and the lease load generator (with the FLAGs) against the other, at
# the same time; their results and cores as STORE's targets CONSUMEKEYS and LEASEKEYS of ROUND.
# Uses leases_side_by_side's pids and ports, and leases_measure's redis_pids.
side_by_side_run() {
  local store=$1 round=$2 keys=$3 i=$4 consume=$5 lease=$6 what=pairs
  shift 6
  local cpid=${pids[i]} cport=${ports[i]} ppid=${pids[1 - i]} pport=${ports[1 - i]}
  local c0 c1 t0 t1 s_c0 s_p0 s_c1 s_p1 r0 r1 load_c load_p target out
  [[ $lease == pairs ]] || what="stream pairs"
  log "leases ($store, side by side), round $round/$LEASE_ROUNDS: $keys key(s)," \
    "Consume on server $i, $what on server $((1 - i))"
  children_cpu
  c0=$CHILDREN_CPU s_c0=$(cpu_seconds "$cpid") s_p0=$(cpu_seconds "$ppid")
  r0=$(cpu_seconds "${redis_pids[@]}") t0=$EPOCHREALTIME
  (SERVER_PORT=$cport DURATION=$LEASE_DURATION run_load \
    "$WORK/lease.$store.$consume$keys.$round.json" "$keys") &
  load_c=$!
  (SERVER_PORT=$pport run_lease_load "$WORK/lease.$store.$lease$keys.$round.json" "$keys" "$@") &
  load_p=$!
  wait "$load_c" || die "the Consume load failed"
  wait "$load_p" || die "the lease load failed"
  children_cpu
  c1=$CHILDREN_CPU s_c1=$(cpu_seconds "$cpid") s_p1=$(cpu_seconds "$ppid")
  r1=$(cpu_seconds "${redis_pids[@]}") t1=$EPOCHREALTIME
  for target in "$consume" "$lease"; do
    out=$WORK/cpu.$store.$target$keys.$round.json
    if [[ $target == "$consume" ]]; then set -- "$s_c0" "$s_c1"; else set -- "$s_p0" "$s_p1"; fi
    write_cores "$out" "$1" "$2" "$c0" "$c1" "$r0" "$r1" "$t0" "$t1"
  done
}

# lease_median STORE TARGET FIELD [PREFIX]: the median over the rounds of FIELD of STORE's TARGET
# results (PREFIX lease, or cpu: the cores used).
lease_median() {
  cat "$WORK/${4:-lease}.$1.$2".*.json | jq -s --arg f "$3" \
    'map(.[$f]) | sort | if length % 2 == 1 then .[length / 2 | floor]
                         else (.[length / 2 - 1] + .[length / 2]) / 2 end'
}

# keys_label KEYS: how the report names a run on KEYS keys.
keys_label() {
  if [[ $1 == 1 ]]; then echo "one hot key"; else echo "$1 keys"; fi
}

# lease_ratio_rows STORE CONSUME LEASE: for the hot key and LEASE_KEYS, a row of the table of
# STORE's runs of Consume (targets CONSUMEKEYS) and of pairs (LEASEKEYS): Consume's requests/s
# and p50 / p99, the pairs' pairs/s and p50 / p99, and a pair's rate over Consume's, the median
# of the rounds' ratios in bold, then the ratios. Sets ROW_RATIOS to the two medians.
lease_ratio_rows() {
  local store=$1 consume=$2 lease=$3 keys label c_rps c_p50 c_p99 p_rps p_p50 p_p99 ratios ratio
  local round
  ROW_RATIOS=()
  for keys in 1 "$LEASE_KEYS"; do
    label=$(keys_label "$keys")
    c_rps=$(lease_median "$store" "$consume$keys" rps)
    c_p50=$(lease_median "$store" "$consume$keys" p50_us)
    c_p99=$(lease_median "$store" "$consume$keys" p99_us)
    p_rps=$(lease_median "$store" "$lease$keys" pairs_per_s)
    p_p50=$(lease_median "$store" "$lease$keys" p50_us)
    p_p99=$(lease_median "$store" "$lease$keys" p99_us)
    # Each round's ratio, of its two runs; their median is the figure.
    ratios=$(for ((round = 1; round <= LEASE_ROUNDS; round++)); do
      jq -n --slurpfile c "$WORK/lease.$store.$consume$keys.$round.json" \
        --slurpfile p "$WORK/lease.$store.$lease$keys.$round.json" '$p[0].pairs_per_s / $c[0].rps'
    done | sort -g)
    ratio=$(awk '{ r[NR] = $1 } END {
      printf "%.2f", NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2 }' <<<"$ratios")
    ratios=$(awk '{ printf "%s%.2f", (NR > 1 ? ", " : ""), $1 }' <<<"$ratios")
    printf '| %s | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f | **%s** (%s) |\n' "$label" "$c_rps" \
      "$c_p50" "$c_p99" "$p_rps" "$p_p50" "$p_p99" "$ratio" "$ratios"
    ROW_RATIOS+=("$ratio")
  done
}

# lease_by_server STORE CONSUME LEASE WHAT: side by side, for the hot key and LEASE_KEYS, each
# server's mean ratio of STORE's LEASE pairs/s over CONSUME requests/s over the rounds it ran the
# pairs (WHAT) in, and the mean of the two: " LABEL: WHAT on server 0 M, on server 1 M, both M;".
lease_by_server() {
  local store=$1 consume=$2 lease=$3 what=$4 k=0 keys label roles round
  # Round r's pairs ran on server 1 - (r + k) % 2 (k: 0 for the hot key, 1 for many keys).
  for keys in 1 "$LEASE_KEYS"; do
    label=$(keys_label "$keys")
    roles=$(for ((round = 1; round <= LEASE_ROUNDS; round++)); do
      jq -rn --arg s "$((1 - (round + k) % 2))" \
        --slurpfile c "$WORK/lease.$store.$consume$keys.$round.json" \
        --slurpfile p "$WORK/lease.$store.$lease$keys.$round.json" \
        '"\($s) \($p[0].pairs_per_s / $c[0].rps)"'
    done)
    awk -v l="$label" -v w="$what" '{ sum[$1] += $2; n[$1]++ } END {
      for (s = 0; s <= 1; s++) m[s] = n[s] ? sprintf("%.3f", sum[s] / n[s]) : "none"
      both = (n[0] && n[1]) ? sprintf("%.3f", (sum[0] / n[0] + sum[1] / n[1]) / 2) : "none"
      printf " %s: %s on server 0 %s, on server 1 %s, both %s;", l, w, m[0], m[1], both }' \
      <<<"$roles"
    k=$((k + 1))
  done
}

# lease_busy_rounds STORE CONSUME: side by side, for the hot key and LEASE_KEYS, how many rounds'
# runs of target CONSUME (and the pairs beside it) had load generators using 0.95 of their core
# or more: " LABEL N of LEASE_ROUNDS;".
lease_busy_rounds() {
  local store=$1 consume=$2 keys round
  for keys in 1 "$LEASE_KEYS"; do
    echo -n " $(keys_label "$keys") $(for ((round = 1; round <= LEASE_ROUNDS; round++)); do
      jq -r .client "$WORK/cpu.$store.$consume$keys.$round.json"
    done | awk '$1 >= 0.95 { n++ } END { print n + 0 }') of $LEASE_ROUNDS;"
  done
}

# lease_cpu_rows STORE CONSUME LEASE REDIS: for the hot key and LEASE_KEYS, a row of the server's
# CPU per Consume (targets CONSUMEKEYS) and per lease call (LEASEKEYS, two a pair), and each
# side's share of its core (and, REDIS 1, the Redis nodes'), medians.
lease_cpu_rows() {
  local store=$1 consume=$2 lease=$3 redis=$4 keys label c_rps p_rps
  local c_server p_server c_client p_client c_redis p_redis
  for keys in 1 "$LEASE_KEYS"; do
    label=$(keys_label "$keys")
    c_rps=$(lease_median "$store" "$consume$keys" rps)
    p_rps=$(lease_median "$store" "$lease$keys" pairs_per_s)
    c_server=$(lease_median "$store" "$consume$keys" server cpu)
    p_server=$(lease_median "$store" "$lease$keys" server cpu)
    c_client=$(lease_median "$store" "$consume$keys" client cpu)
    p_client=$(lease_median "$store" "$lease$keys" client cpu)
    c_redis=$(lease_median "$store" "$consume$keys" redis cpu)
    p_redis=$(lease_median "$store" "$lease$keys" redis cpu)
    awk -v l="$label" -v cr="$c_rps" -v pr="$p_rps" -v cs="$c_server" -v ps="$p_server" \
      -v cc="$c_client" -v pc="$p_client" -v redis="$redis" -v cn="$c_redis" -v pn="$p_redis" \
      'BEGIN {
        printf "| %s | %.1f | %.1f | %.3f / %.3f | %.2f / %.2f |", l, cs / cr * 1e6,
          ps / (2 * pr) * 1e6, cs, ps, cc, pc
        if (redis) printf " %.2f / %.2f |", cn, pn
        printf "\n" }'
  done
}

# leases_report STORE: the markdown of STORE's runs; RocksDB's ratios (hot key, LEASE_KEYS) are
# appended to LEASE_RATIOS and checked against the target, and with the stream pairs
# (LEASE_SIDE_BY_SIDE and LEASE_STREAM) theirs to LEASE_STREAM_RATIOS.
leases_report() {
  local store=$1 name server redis=0
  if [[ $store == redis ]]; then
    name="Redis Cluster" redis=1
    server="One ratelimit-server (\`--store=redis\`, default flags otherwise) on a local Redis"
    server+=" Cluster of 3 primaries and 3 replicas (deploy/redis/start-cluster.sh and its"
    server+=" redis.conf; the nodes unpinned, sharing both CPUs with the server and the load"
    server+=" generator)"
  else
    name=RocksDB server="One ratelimit-server (RocksDB, default flags)"
  fi
  echo "### Concurrency limits end to end: acquire+release pairs beside Consume ($name)"
  echo
  if [[ -n $LEASE_SERVER_CPU ]]; then
    echo "**The server held to $LEASE_SERVER_CPU of a core** by a CPU quota (10 ms periods): it is" \
      "the limit of every run, so the rates compare its own costs."
    echo
  fi
  echo "$server; $PINNING. Consume: the load generator" \
    "(bench/loadgen.cc) as in section 3, $CONCURRENCY calls in flight, \`$LOADGEN_FLAGS\`, an" \
    "inline token bucket nothing is denied by. Pairs: bench/lease_loadgen.cc with the same" \
    "slots, threads and channels; each slot acquires one slot of an inline concurrency limit" \
    "(1e9 slots, nothing refused) and releases the lease it got, so each slot has one call in" \
    "flight as for Consume. $LEASE_DURATION after $WARMUP warm-up each; $LEASE_ROUNDS rounds;" \
    "medians."
  if ((LEASE_SIDE_BY_SIDE)); then
    echo "**Side by side**: two such servers, both on the server's CPU, each held to" \
      "$LEASE_SERVER_CPU of a core; in each round and for each key count, the Consume run and the" \
      "pairs run at the same time, one on each server, the servers swapping roles from run to" \
      "run. pair / Consume: the median of the rounds' ratios (each of two runs made at the same" \
      "time), and the ratios."
  else
    echo "Each round runs a key count's Consume and pairs back to back, in an order alternating" \
      "between rounds and key counts. pair / Consume: the median of the rounds' ratios (each a" \
      "round's pairs over the same round's Consume, run just before or after), and the ratios."
  fi
  echo
  echo "| keys | Consume requests/s | Consume p50 / p99 µs | pairs/s | pair p50 / p99 µs | pair / Consume (rounds) |"
  echo "|---|---|---|---|---|---|"
  lease_ratio_rows "$store" consume pairs
  local store_ratios=("${ROW_RATIOS[@]}")
  echo
  if ((LEASE_SIDE_BY_SIDE)); then
    local line="By server: a round's ratio can depend on which of the two servers ran"
    line+=" the pairs (they share a core under quotas); each server's mean over its rounds, and"
    line+=" the mean of the two (equal weight to each server):"
    line+=$(lease_by_server "$store" consume pairs pairs)
    echo "${line%;}."
    echo
    # A round is the servers' measure only while the load generators keep both busy: on their
    # one core, near all of it, they are the limit instead (another tenant of the machine can
    # take it), and that round's ratio measures them.
    local busy="Rounds whose load generators used 0.95 of their core or more (then they, not the"
    busy+=" servers, limit the rates):"
    busy+=$(lease_busy_rounds "$store" consume)
    echo "${busy%;}."
    echo
  fi
  echo "Server CPU per decision (its core use over a run, warm-up included, divided by the" \
    "decisions per second; a pair is two decisions) and each side's share of its core, medians:" \
    "a side near 1.00 is the limit of that run$( ((LEASE_SIDE_BY_SIDE)) &&
      echo " (side by side: a load generator's figure is both load generators' together, on" \
        "their one core)")."
  if ((redis)); then
    echo "Redis nodes: the six nodes' CPU together, in cores (not in the server's figures); on" \
      "2 CPUs it comes out of the server's and the load generator's cores."
  fi
  echo
  local redis_head="" redis_rule=""
  if ((redis)); then redis_head=" Redis nodes' cores (Consume / pairs) |" redis_rule="---|"; fi
  echo "| keys | server CPU per Consume µs | server CPU per lease call µs | server core (Consume / pairs) | load generator core (Consume / pairs) |$redis_head"
  echo "|---|---|---|---|---|$redis_rule"
  lease_cpu_rows "$store" consume pairs "$redis"
  echo
  if ((redis)); then
    echo "No target on the Redis Cluster (the issue's is about RocksDB): a pair's rate over" \
      "Consume's, hot key ${store_ratios[0]}, $LEASE_KEYS keys ${store_ratios[1]}."
  else
    LEASE_RATIOS+=("${store_ratios[@]}")
    echo "Target: a pair at least half of Consume's requests/s on RocksDB: hot key" \
      "${store_ratios[0]} ($(awk -v r="${store_ratios[0]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }')), $LEASE_KEYS keys" \
      "${store_ratios[1]} ($(awk -v r="${store_ratios[1]}" 'BEGIN { print (r >= 0.5 ? "met" : "not met") }'))."
  fi
  echo
  if ((LEASE_SIDE_BY_SIDE && LEASE_STREAM)); then
    leases_stream_report "$store" "$redis" "${store_ratios[@]}"
  fi
}

# leases_stream_report STORE REDIS HOT MANY: side by side with LEASE_STREAM, the markdown of
# STORE's stream pairs beside their Consume runs, in the shape of leases_report's, ending with
# their ratios next to the unary pairs' (HOT and MANY: the hot key's and LEASE_KEYS'); RocksDB's
# stream ratios are appended to LEASE_STREAM_RATIOS.
leases_stream_report() {
  local store=$1 redis=$2 unary_hot=$3 unary_many=$4
  echo "**Stream pairs**: bench/lease_loadgen.cc with \`--stream\`, the same slots, keys and" \
    "inline limit, each slot's Acquire and Release sent as ops of a LeaseStream (one stream per" \
    "channel, the slots of a channel multiplexed on it; a slot's Release still waits for its" \
    "Acquire's result, so a pair is two decisions in sequence), in a run of their own beside" \
    "each run above: in each round and for each key count, Consume on the server that ran" \
    "Consume and stream pairs on the one that ran the pairs, at the same time, the two runs of" \
    "a key count in an order alternating between rounds. Consume below is the run made beside" \
    "the stream pairs; stream pair / Consume: the median of the rounds' ratios, and the ratios."
  echo
  echo "| keys | Consume requests/s | Consume p50 / p99 µs | stream pairs/s | stream pair p50 / p99 µs | stream pair / Consume (rounds) |"
  echo "|---|---|---|---|---|---|"
  lease_ratio_rows "$store" streamconsume streampairs
  local stream_ratios=("${ROW_RATIOS[@]}")
  echo
  local line="By server, stream pairs: each server's mean over the rounds it ran the stream pairs"
  line+=" in, and the mean of the two:"
  line+=$(lease_by_server "$store" streamconsume streampairs "stream pairs")
  echo "${line%;}."
  echo
  local busy="Stream runs whose load generators used 0.95 of their core or more:"
  busy+=$(lease_busy_rounds "$store" streamconsume)
  echo "${busy%;}."
  echo
  local redis_head="" redis_rule=""
  if ((redis)); then
    redis_head=" Redis nodes' cores (Consume / stream pairs) |" redis_rule="---|"
  fi
  echo "| keys | server CPU per Consume µs | server CPU per stream op µs | server core (Consume / stream pairs) | load generator core (Consume / stream pairs) |$redis_head"
  echo "|---|---|---|---|---|$redis_rule"
  lease_cpu_rows "$store" streamconsume streampairs "$redis"
  echo
  [[ $store == redis ]] || LEASE_STREAM_RATIOS+=("${stream_ratios[@]}")
  echo "Stream pairs: a pair's rate over Consume's, hot key ${stream_ratios[0]} (unary pairs" \
    "$unary_hot), $LEASE_KEYS keys ${stream_ratios[1]} (unary pairs $unary_many)."
  echo
}

# leases_section: the stores of LEASE_STORES, RocksDB first, each measured then reported.
leases_section() {
  local stores store
  read -r -a stores <<<"$LEASE_STORES"
  ((${#stores[@]} > 0)) || die "LEASE_STORES is empty (rocksdb, redis or both)"
  for store in "${stores[@]}"; do
    [[ $store == rocksdb || $store == redis ]] ||
      die "LEASE_STORES: unknown store '$store' (rocksdb, redis)"
  done
  if [[ " ${stores[*]} " == *" redis "* ]]; then
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
      die "LEASE_STORES includes redis: redis-server and redis-cli are required" \
        "(Debian: apt-get install redis-server redis-tools), or set LEASE_STORES=rocksdb"
    fi
  fi
  for store in rocksdb redis; do
    [[ " ${stores[*]} " == *" $store "* ]] || continue
    leases_measure "$store"
    leases_report "$store"
  done
}
LEASE_RATIOS=()
LEASE_STREAM_RATIOS=()
