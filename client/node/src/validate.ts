// Arguments the server would refuse, or could not be sent as the caller wrote them, refused here
// before any call, with a TypeError whose message starts with the field.

// A surrogate code unit without its partner: a string that is not well-formed UTF-16.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Whether `s` is well-formed UTF-16, so that it can be sent as the UTF-8 a protobuf string must
 * be. A lone surrogate ("\uDC00", or half of an emoji cut by slice) cannot: the request would
 * reach the server as invalid UTF-8 and be refused naming no field.
 */
export function isWellFormed(s: string): boolean {
  return !LONE_SURROGATE.test(s);
}

/**
 * The first string of a wire request (as convert.ts builds it) that is not well-formed, named as
 * the server names fields: wire names joined by dots, an index in brackets ("limits[0].key",
 * "request_id", "entries[1].limits[0].key"); undefined when every string is well-formed. The
 * name is built only for a string found, on the way back up.
 */
export function illFormedField(value: unknown): string | undefined {
  if (typeof value === "string") return isWellFormed(value) ? undefined : "";
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const inner = illFormedField(value[i]);
      if (inner !== undefined) return `[${i}]${inner && !inner.startsWith("[") ? "." : ""}${inner}`;
    }
    return undefined;
  }
  if (value === null || typeof value !== "object" || ArrayBuffer.isView(value) || value instanceof Date) {
    return undefined;
  }
  for (const [name, v] of Object.entries(value)) {
    const inner = illFormedField(v);
    if (inner === undefined) continue;
    // A batch entry's request is named after its entry, as the server does
    // ("entries[2].limits[0].key", not "entries[2].request.limits[0].key").
    if (name === "request" && "method" in value) return inner;
    return inner === "" ? name : inner.startsWith("[") ? `${name}${inner}` : `${name}.${inner}`;
  }
  return undefined;
}

/** The TypeError of a string that cannot be sent; it does not echo the string (a key may be a secret). */
export function illFormedError(field: string): TypeError {
  return new TypeError(
    `${field}: must be well-formed Unicode text, without a lone surrogate (it cannot be sent as UTF-8); ` +
      "refused by the client, not sent",
  );
}

/**
 * A lease TTL in ms as the caller gave it, or a TypeError naming `field` and the value: it must
 * be at least 1 ms (the server's lower bound; its upper one is the limit's max lease TTL). A
 * TTL under 1 ms (0 and negative ones included) or one not finite is refused here rather than
 * sent: the server reads whole microseconds and would name a truncated value, or none. An unset
 * TTL (undefined) is not checked: it asks for the limit's lease TTL.
 */
export function checkLeaseTtlMs(ms: number, field: string): number {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 1) {
    throw new TypeError(
      `${field}: must be a finite number of milliseconds, at least 1 (up to the limit's max lease TTL), ` +
        `got ${String(ms)}; refused by the client, not sent`,
    );
  }
  return ms;
}

/**
 * A period or wait in ms as the caller gave it (a lease's heartbeatMs, waitMs), or a TypeError
 * naming `field` and the value: it must be a finite number, 0 or more. A negative or NaN
 * heartbeat would silently turn the heartbeat off, a NaN wait retry forever.
 */
export function checkPeriodMs(ms: number, field: string, meaning = ""): number {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new TypeError(`${field}: must be a finite number of milliseconds, 0 or more${meaning}, got ${String(ms)}`);
  }
  return ms;
}
