#!/usr/bin/env bash
# Formats every C++ file of the repository with clang-format (the root .clang-format), or, with
# --check, changes nothing and fails naming each file clang-format would change. Every file of the
# work tree that git does not ignore, new ones not yet added included. The test suite runs the
# check (house.Formatted, tests/house/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h')
if [[ ${1:-} == --check ]]; then
  clang-format --dry-run -Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
