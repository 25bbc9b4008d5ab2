#!/usr/bin/python3
"""One licence: the repository's LICENSE is the Apache License 2.0, and every package we publish
declares exactly that (the npm package, the Python distribution; the Go module, which has no
metadata field for it, says it in its README).

Usage: licence_test.py REPO_ROOT
"""
import json
import os
import re
import sys
import tomllib
import unittest

REPO = sys.argv.pop(1)
SPDX = "Apache-2.0"
# How a README may name it.
NAMED = r"Apache-2\.0|Apache License,? (Version )?2\.0"


class LicenceTest(unittest.TestCase):
    def test_repository_licence_is_apache_2(self):
        with open(os.path.join(REPO, "LICENSE")) as f:
            text = f.read()
        self.assertIn("Apache License", text)
        self.assertIn("Version 2.0, January 2004", text)

    def test_node_package_declares_it(self):
        with open(os.path.join(REPO, "client/node/package.json")) as f:
            self.assertEqual(json.load(f)["license"], SPDX)

    def test_python_distribution_declares_it(self):
        with open(os.path.join(REPO, "client/python/pyproject.toml"), "rb") as f:
            project = tomllib.load(f)["project"]
        licence = project["license"]
        self.assertEqual(licence if isinstance(licence, str) else licence.get("text"), SPDX)

    def test_every_readme_of_a_package_names_it(self):
        for readme in ("client/go/README.md", "client/node/README.md",
                       "client/python/README.md", "README.md"):
            with open(os.path.join(REPO, readme)) as f:
                self.assertRegex(f.read(), NAMED, readme)


if __name__ == "__main__":
    unittest.main()
