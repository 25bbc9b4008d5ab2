#!/usr/bin/env bash
# The TypeScript client's whole test run, from a clean checkout: installs the locked
# dependencies (npm ci), builds the ESM and CommonJS packages from proto/, and runs the tests
# against the ratelimit-server named by $RATELIMIT_SERVER.
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${RATELIMIT_SERVER:-}" ]; then
  echo "RATELIMIT_SERVER must name a built ratelimit-server (e.g. build/bin/ratelimit-server)" >&2
  exit 2
fi
RATELIMIT_SERVER="$(cd "$(dirname "$RATELIMIT_SERVER")" && pwd)/$(basename "$RATELIMIT_SERVER")"
export RATELIMIT_SERVER
# Offline when the npm cache already holds the locked packages; the registry otherwise.
npm ci --no-audit --no-fund --prefer-offline
npm run build
npm test "$@"
