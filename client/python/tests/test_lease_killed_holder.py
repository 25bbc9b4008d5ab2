"""A holder killed while holding a lease (SIGKILL: no release, no more heartbeats) against a real
server: its slot comes back by itself when the lease expires, no later than the kill plus the
TTL, and not before the lease's expiry."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from conftest import ADMIN_TOKEN, eventually
from ratelimit_client import LimitConfig, LimitSource, RateLimitClient

CONFIG = LimitConfig.concurrency(1, lease_ttl=timedelta(seconds=30))
TTL = 1.0  # the holder's lease TTL (s); its heartbeat extends every third of it

# The holder: holds the slot with `with client.lease(...)` and its heartbeat, prints the lease's
# id, then sleeps until it is killed.
HOLDER = """
import sys, time
from datetime import timedelta
from ratelimit_client import LimitConfig, RateLimitClient
config = LimitConfig.concurrency(1, lease_ttl=timedelta(seconds=30))
with RateLimitClient(sys.argv[1]) as client:
    with client.lease("jobs", "k", config=config, ttl=float(sys.argv[2]), holder="doomed") as lease:
        print(lease.id, flush=True)
        time.sleep(120)
"""


def read_line(proc: subprocess.Popen, deadline_s: float) -> str:
    """The child's first line of output, or AssertionError after deadline_s."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    assert ready, "the holder printed nothing within %ss" % deadline_s
    return proc.stdout.readline().strip()


def test_a_holder_killed_while_holding_frees_its_slot_when_its_lease_expires(server, tmp_path):
    with RateLimitClient(server.target, admin_token=ADMIN_TOKEN) as client:

        def leases():
            return client.list_leases("jobs", "k", source=LimitSource.INLINE,
                                      config=CONFIG).leases

        # sys.executable: the interpreter of the suite (/usr/bin/python3 through the virtual
        # environment that has the client installed).
        with open(tmp_path / "holder.err", "w") as err:
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, server.target, str(TTL)],
                                      stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            lease_id = read_line(holder, 30)
            assert len(lease_id) == 32, (lease_id, (tmp_path / "holder.err").read_text())
            first = leases()
            assert [(l.id, l.holder) for l in first] == [(lease_id, "doomed")]
            # A live holder: its heartbeat moves the expiry on (so what follows is not a lease
            # that would have expired anyway).
            eventually(lambda: leases()[0].expires_at > first[0].expires_at, 10,
                       "an extend by the holder's heartbeat")
            assert not client.acquire("jobs", "k", config=CONFIG).allowed
            os.kill(holder.pid, signal.SIGKILL)
            assert holder.wait(timeout=10) == -signal.SIGKILL
            killed = datetime.now(timezone.utc)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            holder.stdout.close()

        # The lease stays listed (nobody released it) until it expires; its expiry was set by the
        # holder's last extend, sent before the kill: at most the kill + TTL (an extend in flight
        # at the kill may have been decided just after it, hence the 0.5 s).
        listed = leases()
        assert [l.id for l in listed] == [lease_id]
        expires_at = listed[0].expires_at
        assert expires_at <= killed + timedelta(seconds=TTL + 0.5), (expires_at, killed)

        # The slot comes back by itself: a Check finds it free (polled, generous bound), and
        # not before the lease's expiry (same machine, same clock as the server's).
        eventually(lambda: client.check("jobs", "k", config=CONFIG).allowed, 15,
                   "the killed holder's slot to be free")
        assert datetime.now(timezone.utc) >= expires_at
        taken = client.acquire("jobs", "k", config=CONFIG, ttl=5)
        assert taken.allowed and taken.lease.id != lease_id
        assert [l.id for l in leases()] == [taken.lease.id]
