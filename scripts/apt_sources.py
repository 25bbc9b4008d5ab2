#!/usr/bin/python3
"""Prints where this machine's apt gets Debian from, for scripts that build a Debian root file
system (scripts/container-test.sh): one line per item, `name value`:

  mirror   the URI of the source serving the suite (default bookworm) with component main
  security the URI serving <suite>-security (empty when none is configured)
  proxy    apt's HTTP proxy (Acquire::http::Proxy; empty when none)

It reads the sources apt itself reads (Dir::Etc::sourcelist, Dir::Etc::sourceparts, both the
one-line `deb URI suite components` format and deb822 `.sources` files), so a machine behind a
local mirror or a proxy builds from that. Exits 1, saying so, when no source serves the suite.

Usage: apt_sources.py [--suite bookworm] [--root DIR]   (DIR: an etc/apt tree, for tests)
"""
import argparse
import glob
import os
import shlex
import subprocess
import sys


def apt_config(root):
    """Apt's source list, parts directory and HTTP proxy."""
    if root:
        conf = {"list": os.path.join(root, "sources.list"),
                "parts": os.path.join(root, "sources.list.d"), "proxy": ""}
        proxy_file = os.path.join(root, "proxy")
        if os.path.exists(proxy_file):
            with open(proxy_file) as f:
                conf["proxy"] = f.read().strip()
        return conf
    out = subprocess.run(
        ["apt-config", "shell", "ETC", "Dir::Etc/d", "LIST", "Dir::Etc::sourcelist/f",
         "PARTS", "Dir::Etc::sourceparts/d", "PROXY", "Acquire::http::Proxy"],
        check=True, capture_output=True, text=True).stdout
    values = {}
    for token in shlex.split(out.replace(";", " ")):
        if "=" in token:
            k, v = token.split("=", 1)
            values[k] = v
    return {"list": values.get("LIST", "/etc/apt/sources.list"),
            "parts": values.get("PARTS", "/etc/apt/sources.list.d"),
            "proxy": values.get("PROXY", "")}


def one_line_sources(path):
    """(uris, suites, components) of each `deb` line of a one-line-format file."""
    entries = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line.startswith("deb "):
                continue
            words = line.split()[1:]
            if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 3:
                entries.append(([words[0]], [words[1]], words[2:]))
    return entries


def deb822_sources(path):
    """(uris, suites, components) of each enabled `Types: deb` stanza of a .sources file."""
    entries = []
    with open(path) as f:
        stanzas = f.read().split("\n\n")
    for stanza in stanzas:
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.split()
        if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"])[0] == "no":
            continue
        entries.append((fields.get("uris", []), fields.get("suites", []),
                        fields.get("components", [])))
    return entries


def sources(conf):
    entries = []
    if os.path.exists(conf["list"]):
        entries += one_line_sources(conf["list"])
    for path in sorted(glob.glob(os.path.join(conf["parts"], "*.list"))):
        entries += one_line_sources(path)
    for path in sorted(glob.glob(os.path.join(conf["parts"], "*.sources"))):
        entries += deb822_sources(path)
    return entries


def find(entries, suite):
    for uris, suites, components in entries:
        if suite in suites and "main" in components and uris:
            return uris[0].rstrip("/")
    return ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("--root", default="")
    args = parser.parse_args()
    conf = apt_config(args.root)
    entries = sources(conf)
    mirror = find(entries, args.suite)
    if not mirror:
        print(f"apt_sources: no apt source serves {args.suite} main", file=sys.stderr)
        return 1
    print(f"mirror {mirror}")
    print(f"security {find(entries, args.suite + '-security')}")
    print(f"proxy {conf['proxy']}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
