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
