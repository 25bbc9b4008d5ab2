#!/usr/bin/env bash
# Sets up, builds and starts the service on its embedded default: RocksDB in ./data, the
# example limits in deploy/limits.example.yaml, gRPC on 127.0.0.1:8081. Ctrl-C stops it.
# Installs only what compiling the server needs and builds only ratelimit-server and the
# ratelimit CLI (scripts/test.sh installs and builds the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build-only
scripts/build.sh server
exec build/bin/ratelimit-server \
  --listen="${RATELIMIT_LISTEN:-127.0.0.1:8081}" \
  --data_dir=data \
  --limits_file=deploy/limits.example.yaml "$@"
