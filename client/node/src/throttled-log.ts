// Logs repeated errors without flooding the log: the first line of each kind at once, then at
// most one line of that kind per interval, which says how many were left out since the last one.

/** Where the lines go (`console` fits, as do most loggers). */
export interface ErrorLogger {
  error(message: string): unknown;
}

/** At most one line per kind of error per this many ms. */
export const ERROR_LOG_INTERVAL_MS = 10_000;

/** Kinds remembered at once; past this, the rest share one line per interval. */
const MAX_KINDS = 256;
const OVERFLOW_KIND = "\u0000overflow";

interface Kind {
  line: string;
  /** When the last line of this kind was written. */
  loggedAt: number;
  /** Occurrences since then that were not logged. */
  suppressed: number;
}

/**
 * One line per kind of error per interval. `report(kind, line)` writes `line` when no line of
 * `kind` was written in the last interval (adding how many occurrences were left out since the
 * previous line), and otherwise only counts it. A left-out count is written with the next line of
 * its kind, or when its kind is forgotten to make room for others. Memory is bounded (256 kinds).
 */
export class ThrottledLog {
  private readonly kinds = new Map<string, Kind>();

  constructor(
    private readonly logger: ErrorLogger,
    private readonly now: () => number = Date.now,
    private readonly intervalMs: number = ERROR_LOG_INTERVAL_MS,
  ) {}

  /** Logs or counts one occurrence of `kind`; returns whether it wrote a line. */
  report(kind: string, line: string): boolean {
    const now = this.now();
    let k = this.kinds.get(kind);
    if (!k && this.kinds.size >= MAX_KINDS) this.forgetQuiet(now);
    if (!k && this.kinds.size >= MAX_KINDS) {
      kind = OVERFLOW_KIND;
      line = `more than ${MAX_KINDS} distinct errors within ${this.seconds(this.intervalMs)}s; the others are not logged`;
      k = this.kinds.get(kind);
    }
    if (k && now - k.loggedAt < this.intervalMs) {
      k.suppressed++;
      return false;
    }
    const left = k?.suppressed ?? 0;
    this.logger.error(
      left > 0 ? `${line} (${left} more like this in the last ${this.seconds(now - k!.loggedAt)}s were not logged)` : line,
    );
    this.kinds.set(kind, { line, loggedAt: now, suppressed: 0 });
    return true;
  }

  /** Forgets the kinds whose interval is over, writing the counts still owed. */
  private forgetQuiet(now: number): void {
    for (const [kind, k] of this.kinds) {
      if (now - k.loggedAt < this.intervalMs) continue;
      if (k.suppressed > 0) {
        this.logger.error(
          `${k.line} (${k.suppressed} more like this within ${this.seconds(this.intervalMs)}s of its last line were not logged)`,
        );
      }
      this.kinds.delete(kind);
    }
  }

  private seconds(ms: number): number {
    return Math.round(ms / 1000);
  }
}
