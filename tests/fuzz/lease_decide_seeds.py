#!/usr/bin/env python3
"""Writes the seeds of tests/fuzz/corpus/lease_decide: each a run of lease operations that
lease_decide_fuzz.cc decodes (FuzzedDataProvider: values taken from the end of the input, the
most significant byte first), so a seed does what its name says. The encoder takes its values in
the order Run consumes them: run it after changing that order, and read a seed back with
LEASE_DECIDE_TRACE=1 build-asan/bin/lease_decide_fuzz -runs=0 tests/fuzz/corpus/lease_decide/<seed>.

Usage: lease_decide_seeds.py [corpus directory; default tests/fuzz/corpus/lease_decide]
"""
import os, sys
TTL = 10_000_000
class Enc:
    def __init__(self): self.bytes = []; self.ids = 0; self.caps = [0, 0, 0]
    def rng(self, lo, hi, v):
        assert lo <= v <= hi, (lo, hi, v)
        r = hi - lo; v -= lo; n = 0
        while n < 8 and (r >> (8 * n)) > 0: n += 1
        for i in reversed(range(n)): self.bytes.append((v >> (8 * i)) & 0xff)
    def b(self, v): self.rng(0, 255, 1 if v else 0)
    def start(self, store, caps):
        self.rng(0, 2, store)
        for k, c in enumerate(caps):
            small = c <= 6
            self.b(small)
            self.rng(1, 6, c) if small else self.rng(7, 400, c)
            self.caps[k] = c
    def after(self, adv=None):
        if adv is None: self.b(False)
        else: self.b(True); self.rng(0, 1_000_000, adv)
    def advance(self, us, adv=None): self.rng(0, 15, 0); self.rng(0, 3 * TTL, us); self.after(adv)
    def restart(self, adv=None): self.rng(0, 15, 1); self.after(adv)
    def fill(self, key, n, adv=None): self.rng(0, 15, 2); self.rng(0, 2, key); self.rng(1, 300, n); self.ids += n; self.after(adv)
    def delete_all(self, adv=None): self.rng(0, 15, 3); self.after(adv)
    def batch(self, ops, adv=None):
        self.rng(0, 15, 4); self.rng(1, 16, len(ops))
        for op in ops: self.op(**op)
        self.after(adv)
    def some_id(self, back):
        # back: None = an id never acquired; ('recent', i) or ('any', i): the i-th from the end.
        if self.ids == 0: return
        if back is None: self.rng(0, 9, 0); return
        self.rng(0, 9, 1)
        kind, i = back
        self.b(kind == 'recent')
        if kind == 'recent': self.rng(0, min(self.ids, 8) - 1, i)
        else: self.rng(0, self.ids - 1, i)
    def op(self, action, key=0, count=1, request_id=None, holder=None, rate=False, lease=None,
           ttl=None, lower=None):
        self.rng(0, 2, key)
        if action == 'acquire':
            self.rng(0, 15, 0); self.rng(1, 3, count); self.ids += 1
            self.b(request_id is not None)
            if request_id is not None: self.rng(0, 5, request_id)
            self.rng(0, 3, 0 if holder is not None else 1)
            if holder is not None: self.b(holder == 'a')
            self.rng(0, 7, 0 if rate else 1)
        elif action in ('release', 'extend'):
            self.rng(0, 15, 7 if action == 'release' else 11); self.some_id(lease)
        elif action == 'check': self.rng(0, 15, 13); self.rng(1, 3, count)
        elif action == 'list': self.rng(0, 15, 14)
        elif action == 'reset': self.rng(0, 15, 15); self.rng(0, 3, 0)
        if action in ('acquire', 'extend'):
            self.b(ttl is None)
            if ttl is not None: self.rng(1000, 100 * TTL, ttl)
        if lower is not None and self.caps[key] > 1:
            self.rng(0, 31, 0); self.rng(1, self.caps[key] - 1, lower); self.caps[key] = lower
        else: self.rng(0, 31, 1)
    def write(self, path): open(path, 'wb').write(bytes(reversed(self.bytes)))

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "lease_decide")
A = lambda **k: dict(action='acquire', **k)
R = lambda lease, **k: dict(action='release', lease=lease, **k)
X = lambda lease, **k: dict(action='extend', lease=lease, **k)

# Acquires up to capacity and past it (refused, retry_at), a check, releases, an expiry, a list.
e = Enc(); e.start(0, [3, 2, 6])
e.batch([A(count=2), A(), A(), dict(action='check', count=2)])
e.batch([R(('recent', 1)), A(count=2, ttl=4 * TTL), dict(action='list')], adv=500_000)
e.advance(TTL + 1)
e.batch([dict(action='list'), A(count=3), X(('recent', 0), ttl=2000), R(None)])
e.write(os.path.join(out, 'capacity-refusals-and-expiry'))

# Retried acquires: the same request_id twice in one batch and again after a release, with holders.
e = Enc(); e.start(0, [4, 4, 4])
e.batch([A(request_id=1, holder='a'), A(request_id=1, holder='a'), A(request_id=2, holder='b', key=1)])
e.batch([R(('recent', 2)), A(request_id=1, holder='a'), dict(action='list')], adv=10_000)
e.advance(TTL)
e.batch([A(request_id=1, holder='a'), A(request_id=2, key=1), R(('any', 0))])
e.write(os.path.join(out, 'request-id-retries-in-a-batch'))

# A key of 300 slots filled by one batch (its set indexed), then releases, extends and expiries
# found by the index, a restart, and a list.
e = Enc(); e.start(0, [300, 5, 5])
e.fill(0, 290)
e.batch([R(('any', 17)), R(('any', 200)), X(('any', 3), ttl=3 * TTL), A(count=3), R(None)])
e.advance(TTL + 100_000)
e.batch([dict(action='list'), A(count=2, request_id=3), R(('recent', 0)), X(('any', 3))])
e.restart()
e.batch([dict(action='list'), A(), dict(action='check', count=3)])
e.write(os.path.join(out, 'indexed-set-releases-expiries-restart'))

# No cache of lease sets: every decision reads the records; a restart between.
e = Enc(); e.start(1, [5, 3, 200])
e.batch([A(key=0, count=2), A(key=1), A(key=2, count=3), X(('recent', 0), key=2, ttl=5 * TTL)])
e.restart(adv=1)
e.batch([R(('recent', 2), key=0), A(key=1, count=2), A(key=1), dict(action='list', key=2)])
e.advance(TTL)
e.batch([dict(action='list', key=0), dict(action='list', key=1), dict(action='list', key=2)])
e.write(os.path.join(out, 'no-cache-restart'))

# A capacity lowered under held leases, then raised back by a later request (the limits file
# changed twice); a reset of a key and of the whole limit.
e = Enc(); e.start(0, [6, 6, 2])
e.batch([A(count=3), A(count=3), A(key=2, count=2)])
e.batch([A(lower=2), dict(action='check'), dict(action='list')])
e.batch([R(('any', 0)), A(), dict(action='reset', key=2), A(key=2)])
e.delete_all()
e.batch([A(), A(key=2), dict(action='list', key=1)])
e.write(os.path.join(out, 'capacity-lowered-and-resets'))

# Rate limits taken with the slots (5 a second): the sixth acquire in a second is refused by the
# rate and takes no slot; a small cache that evicts as the three keys are used.
e = Enc(); e.start(2, [20, 20, 20])
e.batch([A(rate=True, key=k % 3) for k in range(7)] + [dict(action='list', key=0)])
e.batch([dict(action='list', key=1), dict(action='list', key=2), A(rate=True)], adv=300_000)
e.advance(1_000_000)
e.batch([A(rate=True, key=2), R(('recent', 0), key=2), dict(action='list', key=2)])
e.write(os.path.join(out, 'rate-limits-with-slots-small-cache'))
