"""The middlewares' log of repeated events: one line, then at most one per interval, counting
the repeats it held back (a fake monotonic clock; no sleeps)."""
from __future__ import annotations

import logging
import re

from ratelimit_client._repeated_log import MAX_EVENTS, RepeatedLog


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _log(caplog):
    clock = _Clock()
    caplog.set_level(logging.INFO, logger="test.repeated")
    return RepeatedLog(logging.getLogger("test.repeated"), 10.0, clock), clock


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "test.repeated"]


def test_one_line_per_event_per_interval_and_the_counts_add_up(caplog):
    log, clock = _log(caplog)
    for i in range(100_000):
        clock.t = 1000.0 + i * 0.001  # 100,000 events over 100 s
        log.log(logging.ERROR, ("NOT_FOUND", "no limit x"), "NOT_FOUND: no limit x")
    lines = _lines(caplog)
    assert 10 <= len(lines) <= 11, lines
    assert lines[0] == "NOT_FOUND: no limit x"
    counts = [int(m.group(1)) for m in (re.search(r"repeated (\d+) more times in the last 1\ds",
                                                  line) for line in lines[1:]) if m]
    assert len(counts) == len(lines) - 1
    # Every event is a line or counted in a later line, but for the repeats after the last line.
    assert len(lines) + sum(counts) <= 100_000
    assert 100_000 - (len(lines) + sum(counts)) < 10_001


def test_distinct_events_each_get_their_line(caplog):
    log, clock = _log(caplog)
    for _ in range(3):
        log.log(logging.ERROR, "a", "event a")
        log.log(logging.WARNING, "b", "event b")
    assert _lines(caplog) == ["event a", "event b"]
    clock.t += 10
    log.log(logging.WARNING, "b", "event b")
    assert _lines(caplog)[-1] == "event b (repeated 2 more times in the last 10s)"
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.WARNING,
                                                   logging.WARNING]


def test_too_many_distinct_events_share_one_line_per_interval(caplog):
    log, clock = _log(caplog)
    for i in range(MAX_EVENTS + 500):
        log.log(logging.ERROR, i, "event %d" % i)
    assert len(_lines(caplog)) == MAX_EVENTS + 1  # the rest held back on the overflow line
    clock.t += 10
    log.log(logging.ERROR, "new", "event new")
    assert _lines(caplog)[-1] == "event new"  # expired events were forgotten
