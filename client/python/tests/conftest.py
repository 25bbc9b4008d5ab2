"""Fixtures: a real ratelimit-server ($RATELIMIT_SERVER) per test, on port 0 in the test's temp
dir, stopped by pid (SIGTERM, then SIGKILL) when the test ends, whatever its outcome."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Iterator, List, Optional

import pytest

from ratelimit_client import Clock

ADMIN_TOKEN = "s3cret-admin-token"

LIMITS = """\
limits:
  - name: api
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 3
  - name: other
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 10
"""


def eventually(predicate, deadline_s: float = 10.0, what: str = "condition"):
    """Polls `predicate` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("%s not reached within %ss" % (what, deadline_s))
        time.sleep(0.01)


class Server:
    """A ratelimit-server in `work`, with the limits file `limits` (default LIMITS) and (unless
    admin_token=False: Reset is then disabled) the admin token ADMIN_TOKEN."""

    def __init__(self, binary: str, work: str, extra_args: Optional[List[str]] = None,
                 admin_token: bool = True, limits: str = LIMITS):
        self.work = work
        self.port_file = os.path.join(work, "port")
        self.log_path = os.path.join(work, "server.log")
        self.token_file = os.path.join(work, "token")
        limits_file = os.path.join(work, "limits.yaml")
        with open(limits_file, "w") as f:
            f.write(limits)
        with open(self.token_file, "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        os.chmod(self.token_file, 0o600)
        args = [binary, "--listen=127.0.0.1:0", "--port_file=" + self.port_file,
                "--data_dir=" + os.path.join(work, "data"), "--limits_file=" + limits_file,
                "--metrics_listen=", "--shutdown_grace=1s"] + (extra_args or [])
        if admin_token:
            args.append("--admin_token_file=" + self.token_file)
        env = dict(os.environ)
        env.pop("RATELIMIT_ADMIN_TOKEN", None)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            self.port = eventually(self._read_port, 30, "the server's port file")
        except BaseException:
            self.stop()
            raise
        self.target = "127.0.0.1:%d" % self.port

    def _read_port(self) -> Optional[int]:
        if self.proc.poll() is not None:
            raise AssertionError("ratelimit-server exited with %d before listening:\n%s"
                                 % (self.proc.returncode, self.log()))
        try:
            with open(self.port_file) as f:
                text = f.read().strip()
            return int(text) if text else None
        except FileNotFoundError:
            return None

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def server_binary() -> str:
    binary = os.environ.get("RATELIMIT_SERVER")
    if not binary:
        pytest.fail("RATELIMIT_SERVER must name the ratelimit-server binary (absolute path)")
    if not os.access(binary, os.X_OK):
        pytest.fail("RATELIMIT_SERVER=%s is not an executable file" % binary)
    return binary


@pytest.fixture
def server(server_binary, tmp_path) -> Iterator[Server]:
    s = Server(server_binary, str(tmp_path))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def start_server(server_binary, tmp_path):
    """Starts servers with extra flags: start_server(["--flag=..."]) -> Server;
    start_server([], admin_token=False): a server whose Reset is disabled;
    start_server([], limits=text): one with that limits file."""
    started = []

    def start(extra_args: List[str], admin_token: bool = True, limits: str = LIMITS) -> Server:
        work = tmp_path / ("server%d" % len(started))
        work.mkdir()
        s = Server(server_binary, str(work), extra_args, admin_token, limits)
        started.append(s)
        return s

    try:
        yield start
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def unused_target() -> str:
    """A local address nothing listens on (a port the kernel handed out, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return "127.0.0.1:%d" % port


class FakeClock(Clock):
    """A clock whose sleeps return at once and move its time forward instead: `now` and
    `monotonic` are the real readings plus the time slept so far. `sleeps` lists the sleeps;
    `interrupt` (an exception) is raised by the next sleep instead."""

    def __init__(self) -> None:
        self.slept = 0.0
        self.sleeps: List[float] = []
        self.interrupt: Optional[BaseException] = None

    def now(self) -> datetime:
        return datetime.now(timezone.utc) + timedelta(seconds=self.slept)

    def monotonic(self) -> float:
        return time.monotonic() + self.slept

    def _advance(self, seconds: float) -> None:
        if self.interrupt is not None:
            raise self.interrupt
        self.sleeps.append(seconds)
        self.slept += seconds

    def sleep(self, seconds: float, cancel: Optional[threading.Event] = None) -> bool:
        self._advance(seconds)
        return cancel is not None and cancel.is_set()

    async def sleep_async(self, seconds: float) -> None:
        self._advance(seconds)
        await asyncio.sleep(0)


def approx(expected: float):
    """Token values refill continuously between calls: equal up to a small refill."""
    return pytest.approx(expected, abs=0.01)
