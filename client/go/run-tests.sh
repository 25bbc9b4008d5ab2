#!/usr/bin/env bash
# Builds and tests the Go client offline, against Debian's packaged Go sources
# (/usr/share/gocode: golang-google-grpc-dev, golang-google-protobuf-dev), in GOPATH mode: no
# module proxy and no go.sum are needed. With network access, plain `go test ./...` in module
# mode works too (after `go mod tidy`).
#
# Needs RATELIMIT_SERVER (absolute path of ratelimit-server). --without-settle leaves out the
# tests of Settle, receipts and request_id (settle_test.go), for a server that answers Settle
# UNIMPLEMENTED. Other arguments go to `go test` (e.g. -run Wait -v).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
if [ -z "${RATELIMIT_SERVER:-}" ]; then
  echo "run-tests.sh: set RATELIMIT_SERVER to the absolute path of ratelimit-server" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gopath/src/ratelimit.dev/client"
ln -s "$here" "$work/gopath/src/ratelimit.dev/client/go"
export GO111MODULE=off GOPROXY=off GOFLAGS="" GOPATH="$work/gopath:/usr/share/gocode"
# The build cache is reused between runs when the user has one; else it lives in $work.
if [ -z "${GOCACHE:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ] &&
  { [ -z "${HOME:-}" ] || [ ! -w "$HOME" ]; }; then
  export GOCACHE="$work/cache"
fi
tags=()
args=()
for a in "$@"; do
  if [ "$a" = --without-settle ]; then tags=(-tags nosettle); else args+=("$a"); fi
done
cd "$work/gopath/src/ratelimit.dev/client/go"
go vet "${tags[@]}" ./...
go test "${tags[@]}" -count=1 -timeout 240s "${args[@]}" ./...
