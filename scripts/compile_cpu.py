#!/usr/bin/python3
"""Measures the CPU time (user + sys) that compiles cost, one compile at a time.

  scripts/compile_cpu.py BUILD_DIR [--match REGEX] [--every N] [--pch]

Runs the compile commands of BUILD_DIR/compile_commands.json whose source path matches REGEX
(default: the test files, tests/ less tests/support/), every Nth of them in path order (default 1),
with ccache disabled (CCACHE_DISABLE=1), and prints each one's CPU seconds and the total. --pch
first compiles the precompiled headers the build has (their cost is in the total). CPU time,
unlike wall time, hardly depends on what else the machine runs, so two builds can be compared on
a shared machine (docs/development.md, "Running the tests"). The build directory needs its
generated sources first (e.g. `ninja <the .pb.h files>`, or any build of it); nothing is linked.
"""
import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--match", default=r"/tests/(?!support/)")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--pch", action="store_true")
    args = parser.parse_args()
    with open(os.path.join(args.build_dir, "compile_commands.json")) as f:
        entries = json.load(f)

    def output(e):
        words = shlex.split(e["command"])
        return words[words.index("-o") + 1]

    pch = [e for e in entries if "cmake_pch" in output(e)]
    chosen = sorted((e for e in entries if re.search(args.match, e["file"]) and e not in pch),
                    key=lambda e: e["file"])[::args.every]
    commands = (pch if args.pch else []) + chosen
    env = dict(os.environ, CCACHE_DISABLE="1")
    total = 0.0
    for e in commands:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(e["command"], shell=True, cwd=e["directory"], env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        total += cpu
        print(f"{cpu:8.2f} {e['file']}", flush=True)
    print(f"{total:8.1f} CPU s in {len(commands)} compiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
