#!/usr/bin/env bash
# Writes the proto seeds of the fuzz corpora: each tests/fuzz/textproto/<target>/<name>.textproto
# (a request in protobuf text format) becomes tests/fuzz/corpus/<target>/<name>, the serialized
# request. Run after editing a .textproto; needs protoc.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=../..
encode() {  # encode TARGET MESSAGE PROTO
  local target=$1 message=$2 proto=$3 src
  for src in textproto/"$target"/*.textproto; do
    grep -v '^#' "$src" |
      protoc -I"$ROOT/proto" -I/usr/include --encode="$message" "$proto" \
        >"corpus/$target/$(basename "$src" .textproto)"
  done
}
encode decide ratelimit.v1.RateLimitRequest ratelimit/v1/ratelimit.proto
encode envoy_plan envoy.service.ratelimit.v3.RateLimitRequest envoy/service/ratelimit/v3/rls.proto
