#!/usr/bin/python3
"""scripts/apt_sources.py finds the Debian mirror, security mirror and proxy this machine's apt
uses (so scripts/container-test.sh builds behind whatever mirror or proxy the machine has), in
both source formats; and container-test.sh takes its mirror from it, naming no host of its own.

Usage: apt_sources_test.py REPO_ROOT
"""
import os
import subprocess
import sys
import tempfile
import unittest

REPO = sys.argv.pop(1) if len(sys.argv) > 1 else os.getcwd()
SCRIPT = os.path.join(REPO, "scripts", "apt_sources.py")


def run(root, *args):
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *args],
                          capture_output=True, text=True)


def parsed(out):
    return dict((line.split(" ", 1) + [""])[:2] for line in out.splitlines())


class AptSourcesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        os.makedirs(os.path.join(self.root, "sources.list.d"))

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        with open(os.path.join(self.root, name), "w") as f:
            f.write(text)

    def test_deb822_mirror_security_and_proxy(self):
        self.write("sources.list.d/off.sources",
                   "Types: deb\nURIs: http://disabled.invalid/debian\nSuites: bookworm\n"
                   "Components: main\nEnabled: no\n")
        self.write("sources.list.d/debian.sources",
                   "Types: deb\n# a comment\nURIs: http://mirror.local:3142/debian/\n"
                   "Suites: bookworm bookworm-updates\nComponents: main contrib\n\n"
                   "Types: deb\nURIs: http://mirror.local:3142/debian-security\n"
                   "Suites: bookworm-security\nComponents: main\n")
        self.write("proxy", "http://proxy.local:3128\n")
        r = run(self.root)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(parsed(r.stdout), {"mirror": "http://mirror.local:3142/debian",
                                            "security": "http://mirror.local:3142/debian-security",
                                            "proxy": "http://proxy.local:3128"})

    def test_one_line_format_with_options_and_no_security(self):
        self.write("sources.list",
                   "# deb http://commented.invalid/debian bookworm main\n"
                   "deb-src http://src.invalid/debian bookworm main\n"
                   "deb [arch=amd64 signed-by=/k.gpg] https://apt.example.test/debian bookworm main\n")
        r = run(self.root)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(parsed(r.stdout), {"mirror": "https://apt.example.test/debian",
                                            "security": "", "proxy": ""})

    def test_no_source_for_the_suite_is_an_error(self):
        self.write("sources.list", "deb http://mirror.local/debian bullseye main\n")
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no apt source serves bookworm main", r.stderr)

    def test_container_test_names_no_mirror_host_of_its_own(self):
        with open(os.path.join(REPO, "scripts", "container-test.sh")) as f:
            script = f.read()
        self.assertNotIn("deb.debian.org", script)
        self.assertIn("scripts/apt_sources.py", script)


if __name__ == "__main__":
    unittest.main()
