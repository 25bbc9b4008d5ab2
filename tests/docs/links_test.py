#!/usr/bin/python3
"""Every relative link of the repository's Markdown resolves: the file (or folder) it names
exists, and a `#anchor` names a heading of the Markdown file it points to (GitHub's anchors:
lower case, punctuation dropped, spaces as hyphens, `-1`, `-2` for repeated headings). Links
to other sites (`https:` and the like) are not followed.

Usage: links_test.py REPO_ROOT
"""
import os
import re
import subprocess
import sys
import unittest

REPO = sys.argv.pop(1)

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files():
    out = subprocess.run(["git", "-C", REPO, "ls-files", "--cached", "--others",
                          "--exclude-standard", "*.md"], capture_output=True, text=True,
                         check=True).stdout.split()
    return sorted(f for f in set(out) if "node_modules" not in f
                  and os.path.exists(os.path.join(REPO, f)))


def outside_code(text):
    """The lines of `text` outside fenced code blocks, inline code removed."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield re.sub(r"`[^`]*`", lambda m: m.group(0) if "](" not in m.group(0) else "", line)


def slug(heading):
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    heading = heading.strip().lower()
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def anchors(path):
    with open(path) as f:
        text = f.read()
    found, seen = set(), {}
    for line in outside_code(text):
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    found |= set(re.findall(r'<a (?:name|id)="([^"]+)"', text))
    return found


class LinksTest(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        broken = []
        cache = {}
        for md in markdown_files():
            path = os.path.join(REPO, md)
            with open(path) as f:
                text = f.read()
            for line in outside_code(text):
                for target in LINK.findall(line):
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                        continue
                    file_part, _, anchor = target.partition("#")
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                        if file_part else path
                    if not os.path.exists(dest):
                        broken.append(f"{md}: {target} (no such file)")
                        continue
                    if anchor and dest.endswith(".md"):
                        if dest not in cache:
                            cache[dest] = anchors(dest)
                        if anchor not in cache[dest]:
                            broken.append(f"{md}: {target} (no such heading)")
        self.assertEqual(broken, [], "links that do not resolve:\n" + "\n".join(broken))

    def test_the_readme_links_each_reference_doc(self):
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        for doc in ("api", "configuration", "envoy", "redis", "operations", "performance",
                    "development"):
            self.assertIn(f"(docs/{doc}.md)", readme)


if __name__ == "__main__":
    unittest.main()
