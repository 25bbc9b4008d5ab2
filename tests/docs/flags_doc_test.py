#!/usr/bin/python3
"""The flags the docs name are the flags the programs have, and the reverse.

- Every `--flag` (snake_case, as ours are) written in a Markdown file of the repository is a
  flag of ratelimit-server or of the ratelimit CLI (their --help), or one of the few flags of
  other tools the docs show (OTHER_TOOLS below).
- Every flag of ratelimit-server has a row in a flag table of the docs (a table row starting
  "| `--flag`"), and every flag of the CLI is named somewhere in the docs.
- --help exits 0 for both programs.
A flag of one of our other programs (the load generator and benchmarks, given after the CLI)
may be named too.

Usage: flags_doc_test.py REPO_ROOT SERVER_BINARY CLI_BINARY [OTHER_BINARY...]
"""
import glob
import os
import re
import subprocess
import sys
import unittest

REPO, SERVER, CLI = sys.argv[1:4]
OURS = sys.argv[4:]
del sys.argv[1:]

# Flags of other people's programs that the docs show in their commands.
OTHER_TOOLS = {
    "help", "version",  # every program's
    "tls_",  # "`--tls_*`": the TLS flags as a group
    "format",  # podman build/inspect --format
    "cluster", "pipe",  # redis-cli --cluster, --pipe
    "sort",  # perf report --sort
}

FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)(?![\w-])")
TABLE_ROW = re.compile(r"^\|\s*`--([a-z][a-z0-9_]*)`")


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True)
    return out.returncode, set(re.findall(r"^  --([a-z0-9_]+)=", out.stdout, re.M))


def markdown_files():
    out = subprocess.run(["git", "-C", REPO, "ls-files", "*.md"], capture_output=True,
                         text=True, check=True).stdout.split()
    return [os.path.join(REPO, f) for f in out if "node_modules" not in f]


class FlagsDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server_exit, cls.server = help_flags(SERVER)
        cls.cli_exit, cls.cli = help_flags(CLI)
        cls.ours = set()
        for binary in OURS:  # absl's --helpfull, or Google Benchmark's --help
            for flag in ("--helpfull", "--help"):
                out = subprocess.run([binary, flag], capture_output=True, text=True, timeout=30)
                cls.ours |= set(re.findall(r"--([a-z][a-z0-9_]*)", out.stdout + out.stderr))
        cls.named = {}  # flag -> the files naming it
        cls.table_rows = set()
        for path in markdown_files():
            with open(path) as f:
                text = f.read()
            for flag in FLAG.findall(text):
                cls.named.setdefault(flag, set()).add(os.path.relpath(path, REPO))
            for line in text.splitlines():
                m = TABLE_ROW.match(line)
                if m:
                    # A row may name several flags: "| `--a`, `--b` | ..."
                    first_cell = line.split("|")[1]
                    cls.table_rows.update(FLAG.findall(first_cell))

    def test_help_exits_zero_and_lists_flags(self):
        self.assertEqual(self.server_exit, 0)
        self.assertEqual(self.cli_exit, 0)
        self.assertIn("data_dir", self.server)
        self.assertIn("timeout", self.cli)

    def test_every_flag_the_docs_name_exists(self):
        unknown = {flag: sorted(files) for flag, files in self.named.items()
                   if flag not in self.server | self.cli | self.ours | OTHER_TOOLS}
        self.assertEqual(unknown, {}, "flags in the docs that no program has")

    def test_every_server_flag_has_a_row_in_a_flag_table(self):
        self.assertEqual(sorted(self.server - self.table_rows), [],
                         "server flags without a row in a flag table of the docs")

    def test_every_cli_flag_is_documented(self):
        self.assertEqual(sorted(self.cli - set(self.named)), [], "CLI flags the docs never name")


if __name__ == "__main__":
    unittest.main()
