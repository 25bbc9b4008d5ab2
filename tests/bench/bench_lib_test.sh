#!/usr/bin/env bash
# The bench's per-process directories (scripts/bench-lib.sh new_run_dir): each server or collector
# the bench starts gets a directory no other one had, however $RANDOM falls, so a server never
# finds an earlier server's port file and is measured on that server's port.
set -euo pipefail
root=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=scripts/bench-lib.sh
source "$root/scripts/bench-lib.sh"

fail() { echo "FAIL: $*"; exit 1; }

RANDOM=7
first=$(new_run_dir server)
echo 41249 >"$first/port"
RANDOM=7  # the same draw again: names taken from $RANDOM would repeat here
second=$(new_run_dir server)
[[ $first != "$second" ]] || fail "two calls gave one directory: $first"
[[ -d $second && -z $(ls -A "$second") ]] || fail "$second is not a new empty directory"
[[ ! -e $second/port ]] || fail "the second server would read the first's port file"
[[ $(dirname "$second") == "$WORK" && $(basename "$second") == server.* ]] ||
  fail "$second is not WORK/server.*"

# Every file bench.sh names for a process it starts comes from such a directory, not from $RANDOM.
# shellcheck disable=SC2016  # the pattern is for grep, not the shell
if uses=$(grep -n 'WORK/[A-Za-z._-]*\$RANDOM' "$root/scripts/bench.sh"); then
  fail "bench.sh still names files from \$RANDOM: $uses"
fi
echo "PASS"
