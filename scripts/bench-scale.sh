#!/usr/bin/env bash
# Cost as the work grows: throughput, resident memory and disk per key at 10k, 1M and 10M
# distinct keys, with 1, 3 and 16 limits per request, in process on the RocksDB store
# (bench/scale_bench.cc; one process per key count, so each RSS is its own). Prints a markdown
# table on stdout; progress and raw output go to stderr.
#
# Usage: scripts/bench-scale.sh [> scale.md]
# Environment (defaults): BUILD_DIR (build-bench), KEYS (10000 1000000 10000000), LIMITS (1,3,16),
#   SECONDS_PER_RUN (5), BLOCK_CACHE_MB (64), STATE_CACHE_MB (256),
#   SKIP_BUILD (0), NICE (0: the niceness to run at).
# Needs about 1.5 GB of disk under $TMPDIR for 10M keys, and takes about 5 minutes (2 cores).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
KEYS=${KEYS:-10000 1000000 10000000}
LIMITS=${LIMITS:-1,3,16}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
BLOCK_CACHE_MB=${BLOCK_CACHE_MB:-64}
STATE_CACHE_MB=${STATE_CACHE_MB:-256}
SKIP_BUILD=${SKIP_BUILD:-0}
NICE=${NICE:-0}

log() { printf '[bench-scale] %s\n' "$*" >&2; }
command -v jq >/dev/null || { log "jq is required (apt-get install jq)"; exit 1; }

if [[ $SKIP_BUILD != 1 ]]; then
  log "building ratelimit_scale_bench (Release) in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
    -DRATELIMIT_BUILD_BENCH=ON >&2
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target ratelimit_scale_bench >&2
fi
BENCH=$BUILD_DIR/bin/ratelimit_scale_bench
[[ -x $BENCH ]] || { log "$BENCH was not built"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-scale.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

for n in $KEYS; do
  log "$n keys"
  nice -n "$NICE" "$BENCH" --keys="$n" --limits="$LIMITS" --seconds="$SECONDS_PER_RUN" \
    --block_cache_mb="$BLOCK_CACHE_MB" --state_cache_mb="$STATE_CACHE_MB" --dir="$WORK" --json | tee -a "$WORK/scale.jsonl" >&2
done

echo "| distinct keys | limits/request | requests/s | limit decisions/s | RSS after populating (MiB) | RSS after the run (MiB) | RSS after malloc_trim (MiB) | memtables (MiB) | block cache (MiB) | state cache (MiB) | disk bytes/key, flushed | disk bytes/key, compacted |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
jq -r -s 'def r: if . == null then "-" else round end;
  (map(select(.disk_bytes_per_key_flushed != null)) |
   map({key: (.keys | tostring), value: .}) | from_entries) as $disk |
  .[] | select(.limits != null) |
  "| \(.keys) | \(.limits) | \(.requests_per_s | r) | \(.decisions_per_s | r) | " +
  "\(.rss_populated_mib | r) | \(.rss_mib | r) | \(.rss_trimmed_mib | r) | " +
  "\(.memtables_mib | r) | \(.block_cache_mib | r) | \(.state_cache_mib | r) | " +
  "\($disk[.keys | tostring].disk_bytes_per_key_flushed) | " +
  "\($disk[.keys | tostring].disk_bytes_per_key_compacted) |"' "$WORK/scale.jsonl"
