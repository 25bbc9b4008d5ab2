#!/usr/bin/env bash
# Regenerates gen/ratelimit/v1/*.pb.go from proto/ratelimit/v1/ratelimit.proto with protoc,
# protoc-gen-go and protoc-gen-go-grpc (Debian: protobuf-compiler, protoc-gen-go,
# protoc-gen-go-grpc). The generated code is committed, so users of the module need none of them.
#   generate.sh            rewrite gen/ in place
#   generate.sh --check    regenerate into a temporary directory and fail if gen/ differs
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
proto_dir="$(cd "$here/../../proto" && pwd)"
import_path="ratelimit.dev/client/go/gen/ratelimit/v1;ratelimitv1"

generate() {
  local out="$1"
  mkdir -p "$out"
  protoc -I "$proto_dir" \
    --go_out="$out" --go_opt=paths=source_relative \
    --go_opt="Mratelimit/v1/ratelimit.proto=$import_path" \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
    --go-grpc_opt="Mratelimit/v1/ratelimit.proto=$import_path" \
    ratelimit/v1/ratelimit.proto
}

case "${1:-}" in
  "")
    generate "$here/gen"
    ;;
  --check)
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    if ! diff -ru "$here/gen" "$tmp"; then
      echo "gen/ is out of date with proto/: run client/go/generate.sh and commit the result" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac
