#!/usr/bin/python3
"""Runs the install commands a README shows, exactly as written, in a fresh copy of the
repository: every fenced ```sh block directly below a line `<!-- ci: install -->`, with
`bash -euo pipefail`, the copy's root as the working directory, TMPDIR a directory removed with
the copy. A block that fails fails the
test, with its output.

The copy holds the repository's tracked files and the untracked ones git does not ignore (so it
is what a fresh clone of this work tree would be), nothing built.

Usage: readme_commands_test.py REPO_ROOT README [README...]   (README paths relative to the root)
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

REPO = sys.argv[1]
READMES = sys.argv[2:]
del sys.argv[1:]

MARKER = "<!-- ci: install -->"
BLOCK = re.compile(r"^" + re.escape(MARKER) + r"\s*\n```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)


def install_blocks(readme):
    with open(os.path.join(REPO, readme)) as f:
        return BLOCK.findall(f.read())


def fresh_copy(into):
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True).stdout
    listed = [f for f in files.decode().split("\0") if f and os.path.lexists(os.path.join(REPO, f))]
    subprocess.run(["tar", "-C", REPO, "--null", "-T", "-", "-cf", "-"], input="\0".join(listed).encode(),
                   stdout=open(os.path.join(into, "copy.tar"), "wb"), check=True)
    root = os.path.join(into, "repo")
    os.makedirs(root)
    subprocess.run(["tar", "-C", root, "-xf", os.path.join(into, "copy.tar")], check=True)
    os.remove(os.path.join(into, "copy.tar"))
    return root


class ReadmeCommandsTest(unittest.TestCase):
    def test_every_marked_install_block_runs_as_written(self):
        for readme in READMES:
            blocks = install_blocks(readme)
            self.assertTrue(blocks, f"{readme} has no block marked {MARKER}")
            for i, block in enumerate(blocks):
                with self.subTest(readme=readme, block=i), tempfile.TemporaryDirectory() as tmp:
                    root = fresh_copy(tmp)
                    # What the block makes with mktemp lands in `tmp` and goes with it.
                    block_tmp = os.path.join(tmp, "tmp")
                    os.mkdir(block_tmp)
                    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root,
                                         env=dict(os.environ, TMPDIR=block_tmp),
                                         capture_output=True, text=True, timeout=900)
                    self.assertEqual(run.returncode, 0,
                                     f"{readme} block {i} failed:\n{block}\n--- output ---\n"
                                     f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}")


if __name__ == "__main__":
    unittest.main()
