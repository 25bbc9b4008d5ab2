"""The README's lease example runs as written (its target replaced by the test server's)
against the fake of the lease calls, and against a real server loaded with the example limits
file (deploy/limits.example.yaml, which scripts/run.sh serves at the example's address)."""
from __future__ import annotations

import contextlib
import io
import os
import re

from lease_fake import FakeLeases
from ratelimit_client import RateLimitClient

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")
EXAMPLE_LIMITS = os.path.join(HERE, "..", "..", "..", "deploy", "limits.example.yaml")
MARKER = "<!-- test: lease example"


def example() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    found = re.search(re.escape(MARKER) + r"[^\n]*\n```python\n(.*?)^```", text, re.M | re.S)
    assert found, "README.md has no lease example block"
    return found.group(1)


def run_example(target: str) -> str:
    code = example()
    assert '"127.0.0.1:8081"' in code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace('"127.0.0.1:8081"', repr(target)), README, "exec"), {})
    return out.getvalue()


def test_the_readme_lease_example_against_the_fake():
    fake = FakeLeases(capacity=5)
    try:
        out = run_example(fake.target)
        assert out.startswith("holding 1 slot until ")
        assert len(fake.acquires) == 1 and fake.acquires[0].holder == "worker-1"
        assert fake.acquires[0].limits[0].name == "llm_calls"
        assert len(fake.releases) == 1 and fake.held("llm_calls", "org-7") == 0
    finally:
        fake.stop()


def test_the_readme_lease_example_denied_prints_retry_after():
    fake = FakeLeases(capacity=5)
    try:
        with RateLimitClient(fake.target) as other:
            for _ in range(5):  # the example's 5 slots, held by another holder
                assert other.acquire("llm_calls", "org-7")
        out = run_example(fake.target)
        assert out.startswith("no free slot; retry in "), out
        assert not fake.releases
    finally:
        fake.stop()


def test_the_readme_lease_example_against_the_server_with_the_example_limits(start_server):
    with open(EXAMPLE_LIMITS, encoding="utf-8") as f:
        server = start_server([], limits=f.read())
    out = run_example(server.target)
    assert out.startswith("holding 1 slot until "), out
