// The log of repeated errors, on a fake clock: one line per kind per interval, with counts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ERROR_LOG_INTERVAL_MS, ThrottledLog } from "@ratelimit/client";

function fakeLog(): { log: ThrottledLog; lines: string[]; advance: (ms: number) => void } {
  let now = 1_000_000;
  const lines: string[] = [];
  const log = new ThrottledLog({ error: (line: string) => lines.push(line) }, () => now);
  return { log, lines, advance: (ms) => (now += ms) };
}

test("the first error of a kind is logged at once, its repeats within 10 s are only counted", () => {
  const { log, lines, advance } = fakeLog();
  assert.equal(ERROR_LOG_INTERVAL_MS, 10_000);
  assert.equal(log.report("NOT_FOUND: x", "line x"), true);
  for (let i = 0; i < 999; i++) {
    advance(9);
    assert.equal(log.report("NOT_FOUND: x", "line x"), false);
  }
  assert.deepEqual(lines, ["line x"]);
  advance(10_000 - 999 * 9);
  assert.equal(log.report("NOT_FOUND: x", "line x"), true);
  assert.deepEqual(lines, ["line x", "line x (999 more like this in the last 10s were not logged)"]);
  advance(10_000);
  log.report("NOT_FOUND: x", "line x");
  assert.equal(lines[2], "line x", "nothing was left out since the last line");
});

test("distinct kinds are logged independently, and the counts add up", () => {
  const { log, lines, advance } = fakeLog();
  let total = 0;
  for (let second = 0; second < 60; second++) {
    for (const kind of ["A", "B", "C"]) {
      for (let i = 0; i < 100; i++) {
        log.report(kind, kind);
        total++;
      }
    }
    advance(1000);
  }
  for (const kind of ["A", "B", "C"]) {
    log.report(kind, kind);
    total++;
  }
  // 6000 a kind: a line every 10 s (6 each), then the last one with the rest of its count.
  assert.ok(lines.length <= 3 * 7, lines.join("\n"));
  let counted = 0;
  for (const line of lines) {
    const m = / \((\d+) more like this/.exec(line);
    counted += 1 + (m ? Number(m[1]) : 0);
  }
  assert.equal(counted, total);
});

test("memory is bounded: past 256 kinds at once, the others share one line", () => {
  const { log, lines, advance } = fakeLog();
  for (let i = 0; i < 256; i++) log.report(`k${i}`, `line ${i}`);
  assert.equal(lines.length, 256);
  log.report("k256", "line 256");
  log.report("k257", "line 257");
  assert.equal(lines.length, 257);
  assert.match(lines[256]!, /^more than 256 distinct errors within 10s/);
  // Once the interval is over, the old kinds are forgotten (their counts written) to make room.
  log.report("k0", "line 0");
  advance(10_000);
  log.report("k300", "line 300");
  assert.deepEqual(lines.slice(257), [
    "line 0 (1 more like this within 10s of its last line were not logged)",
    "more than 256 distinct errors within 10s; the others are not logged (1 more like this within 10s of its last line were not logged)",
    "line 300",
  ]);
});
