#!/usr/bin/env bash
# scripts/format.sh --check looks at every C++ file of the work tree that git does not ignore, new
# ones included: a file not yet added fails the check before it is committed, not in CI after.
# Run in a new git repository in a temporary directory, with the repository's script and style.
set -euo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/scripts"
cp "$root/scripts/format.sh" "$work/scripts/"
cp "$root/.clang-format" "$work/"
cd "$work"
git init -q
printf 'int Added() { return 1; }\n' >added.cc
printf '/build/\n' >.gitignore
git add added.cc .gitignore .clang-format scripts/format.sh
mkdir -p build
printf 'int   Ignored( ){return 2;}\n' >build/ignored.cc
scripts/format.sh --check || { echo "FAIL: a formatted tree was refused"; exit 1; }
printf 'int   NotAdded( ){return 3;}\n' >new.cc
if out=$(scripts/format.sh --check 2>&1); then
  echo "FAIL: a badly formatted file not yet added passed the check"
  exit 1
fi
grep -q 'new.cc' <<<"$out" || { echo "FAIL: the check did not name new.cc: $out"; exit 1; }
grep -q 'ignored.cc' <<<"$out" && { echo "FAIL: an ignored file was checked: $out"; exit 1; }
echo "PASS"
