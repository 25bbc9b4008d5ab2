"""The installed package type-checks under mypy --strict (its config is in pyproject.toml)."""
from __future__ import annotations

import os
import subprocess
import sys

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_package_passes_mypy_strict(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(SOURCE, "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "-p", "ratelimit_client"],
        capture_output=True, text=True, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_failure_mode_is_a_literal_type_not_a_free_string(tmp_path):
    """mypy refuses a failure_mode other than "open" or "closed" where the middlewares are
    built."""
    snippet = tmp_path / "app.py"
    snippet.write_text(
        "from ratelimit_client.asgi import RateLimitMiddleware\n"
        "from ratelimit_client.fastapi import RateLimit\n"
        "from ratelimit_client.http import FAIL_OPEN\n"
        "async def app(scope: object, receive: object, send: object) -> None: ...\n"
        "ok = RateLimitMiddleware(app, '127.0.0.1:1', 'api', failure_mode='closed')\n"
        "ok2 = RateLimit('127.0.0.1:1', 'api', failure_mode=FAIL_OPEN)\n"
        "bad = RateLimitMiddleware(app, '127.0.0.1:1', 'api', failure_mode='sideways')\n"
        "bad2 = RateLimit('127.0.0.1:1', 'api', failure_mode='fail-open')\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir",
         str(tmp_path / "cache"), str(snippet)],
        capture_output=True, text=True, cwd=str(tmp_path))
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["7", "8"], result.stdout
    assert all("failure_mode" in line for line in errors), result.stdout
