#!/usr/bin/env bash
# Runs a test command with TMPDIR set to a new, empty directory of its own, and fails the test
# when the command leaves anything there: a test whose temporary directories outlive it fills the
# disk of a machine that runs the suite many times (the clients' tests each left one to thirteen
# behind on every run). The directory is removed afterwards either way.
#
# Usage: in_own_tmpdir.sh COMMAND [ARG...]   Exits with COMMAND's status, or 1 when it passed but
# left files behind (listed).
set -uo pipefail
own="$(mktemp -d)"
trap 'rm -rf "$own"' EXIT
TMPDIR="$own" "$@"
status=$?
left="$(find "$own" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)"
if [ "$status" -eq 0 ] && [ -n "$left" ]; then
  echo "in_own_tmpdir.sh: the test passed but left these in its TMPDIR ($own):" >&2
  echo "$left" | sed 's/^/  /' >&2
  exit 1
fi
exit "$status"
