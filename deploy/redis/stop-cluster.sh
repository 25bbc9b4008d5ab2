#!/bin/sh
# Stops the nodes start-cluster.sh started in DIR (SIGTERM to the pid of each DIR/*/redis.pid, then
# waits up to 10 s for each to exit). Usage: stop-cluster.sh DIR
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
# Running (a zombie left to a container's init that does not reap counts as exited).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/status" ] && grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; then return 1; fi
  return 0
}
status=0
for pidfile in "$1"/*/redis.pid; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  tries=100
  while alive "$pid"; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      echo "redis pid $pid did not exit" >&2
      status=1
      break
    fi
    sleep 0.1
  done
done
exit $status
