#!/bin/sh
# Starts a Redis Cluster of 3 primaries and 3 replicas on 127.0.0.1 with redis.conf (next to this
# script) and creates it with `redis-cli --cluster create`. Each node lives in DIR/<port> (data,
# AOF, nodes.conf, redis.pid, redis.log). Prints the seed list for --redis_address once every node
# reports the cluster ok and every replica is in sync.
#
# Usage: start-cluster.sh DIR [PORT PORT PORT PORT PORT PORT]
#   default ports 7000-7005; each port's cluster bus port (port + 10000) must be free too.
# Stop the nodes with stop-cluster.sh DIR.
set -eu

if [ $# -ne 1 ] && [ $# -ne 7 ]; then
  echo "usage: $0 DIR [PORT x6]" >&2
  exit 2
fi
dir=$1
shift
if [ $# -eq 0 ]; then set -- 7000 7001 7002 7003 7004 7005; fi
conf=$(cd "$(dirname "$0")" && pwd)/redis.conf
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

wait_for() {  # wait_for SECONDS COMMAND...: retries COMMAND until it succeeds
  tries=$(($1 * 10))
  shift
  while ! "$@" >/dev/null 2>&1; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then return 1; fi
    sleep 0.1
  done
}

answers() { [ "$(redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null)" = PONG ]; }

for port in "$@"; do
  mkdir -p "$dir/$port"
  redis-server "$conf" --port "$port" --dir "$dir/$port" --daemonize yes \
    --pidfile "$dir/$port/redis.pid" --logfile "$dir/$port/redis.log"
done
nodes=""
for port in "$@"; do
  if ! wait_for 20 answers "$port"; then
    echo "redis node 127.0.0.1:$port did not start; see $dir/$port/redis.log" >&2
    exit 1
  fi
  nodes="$nodes 127.0.0.1:$port"
done

# shellcheck disable=SC2086
redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
  echo "redis-cli --cluster create failed; see $dir/create.log" >&2
  exit 1
}

ready() {
  info=$(redis-cli -h 127.0.0.1 -p "$1" CLUSTER INFO) || return 1
  case $info in *cluster_state:ok*) ;; *) return 1 ;; esac
  repl=$(redis-cli -h 127.0.0.1 -p "$1" INFO replication) || return 1
  case $repl in *role:slave*) case $repl in *master_link_status:up*) ;; *) return 1 ;; esac ;; esac
  # A primary counts a replica for WAIT and min-replicas-to-write only once it sees the replica
  # online, which can come after the replica reports its link up: wait until a WAIT for one
  # replica (on a connection that wrote nothing) answers 1.
  case $repl in
    *role:master*)
      acked=$(redis-cli -h 127.0.0.1 -p "$1" WAIT 1 200) || return 1
      [ "${acked:-0}" -ge 1 ] 2>/dev/null || return 1
      ;;
  esac
}
for port in "$@"; do
  if ! wait_for 60 ready "$port"; then
    echo "redis node 127.0.0.1:$port: cluster not ok or replica not in sync" >&2
    exit 1
  fi
done
echo "$nodes" | sed 's/^ //; s/ /,/g'
