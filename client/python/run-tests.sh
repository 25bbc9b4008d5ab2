#!/usr/bin/env bash
# Installs the client into a fresh virtual environment (offline: Debian's python3-grpcio,
# python3-protobuf, python3-fastapi and python3-pytest come from the system site-packages) and
# runs its pytest suite against the ratelimit-server named by $RATELIMIT_SERVER.
# Usage: RATELIMIT_SERVER=/abs/path/ratelimit-server client/python/run-tests.sh [pytest args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "${RATELIMIT_SERVER:-}" ]; then
  echo "run-tests.sh: set RATELIMIT_SERVER to the ratelimit-server binary (absolute path)" >&2
  exit 2
fi
python=/usr/bin/python3  # Debian's interpreter, whose site-packages hold the dependencies
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
# --no-index: nothing is downloaded; the dependencies must already be installed.
"$work/venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$here"
# Run from the temp dir, so the tests import the installed package, not the source tree. A test
# still running after 120 s dumps every thread's stack (faulthandler), so a hang says where.
# Not exec'd: the shell stays to remove $work when pytest ends; pytest's own temporary
# directories (tmp_path) are made in $work too, not kept in the system's.
cd "$work"
"$work/venv/bin/python" -m pytest -p no:cacheprovider -o faulthandler_timeout=120 \
  --basetemp="$work/pytest" \
  --rootdir="$here/tests" "$here/tests" "$@"
