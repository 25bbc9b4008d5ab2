#!/usr/bin/python3
"""The flag reference is the programs' --help, in both directions.

- docs/configuration.md has one flag table per program, each directly below a line
  `<!-- flags: ratelimit-server -->` or `<!-- flags: ratelimit -->`, with rows
  "| `--flag` | default | meaning |" (a row may name several flags that share a default:
  "| `--a`, `--b` | ...").
- Every flag `ratelimit-server --help` prints has a row in the server's table, and every row of
  that table is a flag of the server; the same for the `ratelimit` CLI and its table.
- The default a row gives is the default --help prints ("none" for an empty one).
- Every `--flag` (snake_case, as ours are) written in any other Markdown file of the repository
  is a flag of ratelimit-server or of the CLI, or one of the few flags of other tools the docs
  show (OTHER_TOOLS below). A flag of one of our other programs (the load generator and
  benchmarks, given after the CLI) may be named too.
- --help exits 0 for both programs.

Usage: flags_doc_test.py REPO_ROOT SERVER_BINARY CLI_BINARY [OTHER_BINARY...]
"""
import os
import re
import subprocess
import sys
import unittest

REPO, SERVER, CLI = sys.argv[1:4]
OURS = sys.argv[4:]
del sys.argv[1:]

REFERENCE = "docs/configuration.md"
SERVER_TABLE = "ratelimit-server"
CLI_TABLE = "ratelimit"

# Flags of other people's programs that the docs show in their commands.
OTHER_TOOLS = {
    "help", "version",  # every program's
    "tls_",  # "`--tls_*`": the TLS flags as a group
    "format",  # podman build/inspect --format
    "cluster", "pipe",  # redis-cli --cluster, --pipe
    "sort",  # perf report --sort
}

FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)(?![\w-])")
MARKER = re.compile(r"^<!-- flags: ([a-z-]+) -->\s*$")


def help_flags(binary):
    """Exit status, and {flag: default} as --help prints them ("  --flag=default")."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return out.returncode, dict(re.findall(r"^  --([a-z0-9_]+)=(.*)$", out.stdout, re.M))


def markdown_files():
    out = subprocess.run(["git", "-C", REPO, "ls-files", "--cached", "--others",
                          "--exclude-standard", "*.md"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [os.path.join(REPO, f) for f in sorted(set(out))
            if "node_modules" not in f and os.path.exists(os.path.join(REPO, f))]


def flag_tables(text):
    """{program: {flag: documented default}} from the tables below the markers."""
    tables = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        rows = tables.setdefault(m.group(1), {})
        j = i + 1
        while j < len(lines) and lines[j].startswith("|"):
            cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
            j += 1
            if not cells[0].startswith("`--"):
                continue  # the header and its separator
            default = cells[1].strip("`") if len(cells) > 1 else None
            for flag in FLAG.findall(cells[0]):
                rows[flag] = "" if default == "none" else default
    return tables


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
        for path in markdown_files():
            with open(path) as f:
                text = f.read()
            for flag in FLAG.findall(text):
                cls.named.setdefault(flag, set()).add(os.path.relpath(path, REPO))
        with open(os.path.join(REPO, REFERENCE)) as f:
            cls.tables = flag_tables(f.read())

    def test_help_exits_zero_and_lists_flags(self):
        self.assertEqual(self.server_exit, 0)
        self.assertEqual(self.cli_exit, 0)
        self.assertIn("data_dir", self.server)
        self.assertIn("timeout", self.cli)

    def test_the_reference_has_a_table_per_program(self):
        self.assertIn(SERVER_TABLE, self.tables, f"no <!-- flags: {SERVER_TABLE} --> table")
        self.assertIn(CLI_TABLE, self.tables, f"no <!-- flags: {CLI_TABLE} --> table")

    def check_table(self, program, flags):
        table = self.tables.get(program, {})
        self.assertEqual(sorted(set(flags) - set(table)), [],
                         f"flags of {program} --help without a row in {REFERENCE}")
        self.assertEqual(sorted(set(table) - set(flags)), [],
                         f"rows of {program}'s table in {REFERENCE} that {program} does not have")
        wrong = {flag: {"--help": flags[flag], REFERENCE: table[flag]}
                 for flag in sorted(set(table) & set(flags)) if table[flag] != flags[flag]}
        self.assertEqual(wrong, {}, f"defaults of {program} that {REFERENCE} gives otherwise")

    def test_server_table_is_the_server_help(self):
        self.check_table(SERVER_TABLE, self.server)

    def test_cli_table_is_the_cli_help(self):
        self.check_table(CLI_TABLE, self.cli)

    def test_every_flag_the_docs_name_exists(self):
        known = set(self.server) | set(self.cli) | self.ours | OTHER_TOOLS
        unknown = {flag: sorted(files) for flag, files in self.named.items() if flag not in known}
        self.assertEqual(unknown, {}, "flags in the docs that no program has")


if __name__ == "__main__":
    unittest.main()
