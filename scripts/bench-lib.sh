# Shared by scripts/bench.sh and scripts/bench-redis.sh (sourced, not run).

# The machine, for the report's header: CPUS, CPU_MODEL, MEM_GIB, and COMMIT (ROOT's commit,
# marked when the tree has local changes).
read_machine_facts() {
  CPUS=$(nproc)
  CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
  MEM_GIB=$(awk '/^MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null) ]]; then
    COMMIT="$COMMIT (+ local changes)"
  fi
}

# Percentage of CPU time not idle over one second, all CPUs: other work skews every figure.
busy_percent() {
  local a b
  read -r -a a < <(head -1 /proc/stat)
  sleep 1
  read -r -a b < <(head -1 /proc/stat)
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  local idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $(((100 * (total - idle)) / (total > 0 ? total : 1)))
}

# set_pinning DESCRIPTION: on 2+ CPUs with taskset, PIN_SERVER pins to CPU 0 and PIN_CLIENT to
# CPU 1, and PINNING is DESCRIPTION; otherwise both are empty and PINNING is "not pinned".
set_pinning() {
  if [[ $CPUS -ge 2 ]] && command -v taskset >/dev/null; then
    PIN_SERVER=(taskset -c 0)
    PIN_CLIENT=(taskset -c 1)
    PINNING=$1
  else
    PIN_SERVER=()
    PIN_CLIENT=()
    PINNING="not pinned"
  fi
}

# h2load_summary RAW: "requests/s mean_us failed" from h2load's output in RAW. failed: failed +
# errored requests; mean_us: the mean of "time for request", whose unit h2load picks, in µs.
h2load_summary() {
  awk '/finished in/ { rps = $4 } /^requests:/ { failed = $10 + $12 }
       /^time for request:/ { mean = $6  # min max mean sd, each with a unit
         if (mean ~ /ms$/) mean = mean * 1000; else if (mean ~ /us$/) mean = mean + 0
         else mean = mean * 1e6 }
       END { printf "%s %s %s\n", rps, mean, failed }' "$1"
}

# new_run_dir NAME: a new, empty directory under WORK whose name starts with NAME, for the files of
# one process the bench starts (its port files, its data). Made by mktemp, so no two calls share
# one: names drawn from $RANDOM repeated within a run of a few dozen servers, and a server then
# found an earlier one's port file already written and was measured on that server's port.
new_run_dir() {
  mktemp -d "$WORK/$1.XXXXXX"
}

# free_port_pairs N OFFSET: N loopback ports p, space-separated, such that neither p nor p + OFFSET
# is listening (a Redis Cluster node needs its port and its bus port, port + 10000); fewer when
# there are not N free near a random base.
free_port_pairs() {
  local n=$1 offset=$2 base=$((20000 + RANDOM % 9000)) p ports=()
  listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
  for ((p = base; ${#ports[@]} < n && p < base + 1000; p++)); do
    listening "$p" || listening "$((p + offset))" || ports+=("$p")
  done
  echo "${ports[*]}"
}
