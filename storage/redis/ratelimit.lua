#!lua name=ratelimit
-- The rate-limit algebra (storage/algebra.cc) as a Redis function library: one FCALL decides a
-- whole operation on keys of one slot, atomically, and writes its states. It computes exactly
-- what the C++ algebra computes (same IEEE operations in the same order); the server explains the
-- decision (retry_at, reasons, jitter) by running the C++ algebra on the states and time this
-- function returns, and checks that both agree. One table of vectors
-- (tests/support/algebra_vectors.h) runs through both, in algebra_test and redis_lua_test.
--
-- Stored state, one string per key: "<value> <ts_us> <full_at_us>", each printed with '%.17g'
-- (which, with tonumber, round-trips every double exactly); a fixed window's has a fourth,
-- "<counted_against>" (since version 13): the capacity its value is counted against, so that a
-- decision under another capacity (the limit was changed) keeps the count taken in the window.
--
-- Times are microseconds held in doubles, exact below 2^53 (year 2255). The time of a decision
-- must lie in [0, 2^53); any computed time at or past 2^53 is "never" (stored as 2^63), so a
-- full_at that far away keeps the state without expiry. Beyond that horizon the C++ algebra's
-- exact answer is also at or past 2^53, so both agree that it is out of reach.
--
-- Expiry: a written state expires at ceil(full_at_us / 1000) ms (PXAT), never before it has
-- refilled to capacity (a missing state is a full one); expiring early would over-grant.
--
-- FCALL ratelimit_apply <nkeys> <key>... <mode> <now_us or ''> <nlimits> then per limit:
--   <key index, 1-based> <kind 'b'|'w'> <rate> <period_us> <capacity> <max_reserved or ''>
--   <window offset_us> <count>
-- mode: 'c' check, 't' take (consume), 'r' reserve. Numbers as '%.17g'.
-- A limit under a runtime override (LimitConfig::adjustment) has the kind 'B' or 'W' and six more
-- arguments after its count: <effect 'l' limit|'u' unlimited|'x' blocked> <changed_at_us or ''>
--   <before_rate> <before_period_us> <before_capacity> <base_capacity>
-- and is decided as storage/algebra.cc Decide does: unlimited and blocked take nothing and leave
-- the state as it is (DecideFixed); a limit first carries the state across the change
-- (AcrossChange), and a fixed window's state is stored counted against base_capacity. A limit
-- without one has the 8 arguments of library version 8, which this version still takes.
-- Returns {now, allowed 0|1, <state read per key or ''>..., <state written per key or ''>...}.
--
-- The library is assembled from this file, holds.lua (the takes of a request whose keys span
-- slots, and their refunds) and leases.lua (concurrency limits, since version 10), appended after
-- it in that order, which use this file's locals.

local LIBRARY_VERSION = '13'

local BIG = 2 ^ 53     -- the first time that is not represented exactly
local NEVER = 2 ^ 63   -- stands for every time at or past BIG
local TOLERANCE = 4 * 2 ^ -52  -- storage/algebra.cc kRelativeTolerance
local UNBOUNDED_RESERVE = 2e15  -- kMaxAmount * 2

local function beyond(t)
  if t >= BIG then return NEVER end
  return t
end

local function mod(a, b)
  local r = math.fmod(a, b)
  if r < 0 then r = r + b end
  return r
end

local function min(a, b) if b < a then return b end return a end
local function max(a, b) if a < b then return b end return a end

-- t + ceil(d) for d >= 0; NEVER at or past BIG.
local function add_ceil(t, d)
  local c = math.ceil(d)
  if not (c > 0) then return t end
  if c >= BIG then return NEVER end
  return beyond(t + c)
end

local function window_containing(now, offset, period)
  local into = mod(now, period) - offset
  if into < 0 then into = into + period end
  return now - into
end

-- floor((t - ts) / p) and ts + that many periods, exactly for any t, ts below BIG in magnitude.
local function whole_windows(t, ts, p)
  local rt, rs = mod(t, p), mod(ts, p)
  local qt, qs = (t - rt) / p, (ts - rs) / p
  local w = qt - qs
  if rt < rs then w = w - 1 end
  return w, (qs + w) * p + rs
end

-- A limit travels as five values: `b` (true for a token bucket, false for a fixed window),
-- `rate`, `period`, `cap`, `offset`; a state as three: `v` (the balance; false for a key without
-- a state, i.e. a full one), `ts`, and, once written, `full` (its full_at). Locals and arguments,
-- not tables: a decision allocates as little as it can, which is most of its cost in Redis.

-- The balance and its time brought forward to `now`.
local function refill(b, rate, period, cap, offset, v, ts, now)
  if b then
    if not v then return cap, now end
    local elapsed = max(0, now - ts)
    return min(v + elapsed * rate / period, cap), max(now, ts)
  end
  if not v then return cap, window_containing(now, offset, period) end
  local w, at = whole_windows(now, ts, period)
  if w <= 0 then w, at = 0, ts end
  return min(v + rate * w, cap), at
end

local function covers(balance, target, tol)
  local short_by = target - balance
  return short_by <= 0 or short_by < tol
end

-- storage/algebra.cc RefilledAt as FullAt calls it: the earliest t >= ts at which the state
-- (v, ts) has refilled to capacity; NEVER when that is at or past BIG.
local function refilled_at(b, rate, period, cap, offset, v, ts)
  if refill(b, rate, period, cap, offset, v, ts, ts) >= cap then return ts end
  local missing = cap - v
  local t, step
  if b then
    local us = missing * period / rate
    t = max(beyond(ts + 1), beyond(add_ceil(ts, us) - 1))
    step = 1
  else
    local windows = max(1.0, math.ceil(missing / rate) - 1)
    t = add_ceil(ts, windows * period)
    step = period
  end
  for i = 0, 127 do
    if t >= BIG then return NEVER end
    if refill(b, rate, period, cap, offset, v, ts, t) >= cap then return t end
    t = beyond(t + step)
    if i >= 2 then step = step + step end
  end
  return NEVER
end

local function full_at(b, rate, period, cap, offset, v, ts)
  if v >= cap then return ts end
  local at = refilled_at(b, rate, period, cap, offset, v, ts)
  if at == NEVER then return NEVER end
  return beyond(at + 1)
end

-- Whether a time (an integer, or NEVER) prints the same with '%d' as with '%.17g': true below BIG
-- in magnitude, where '%d' costs less than half as much.
local function prints_as_integer(t)
  return t < BIG and t > -BIG
end

local function time_text(t)
  if prints_as_integer(t) then return string.format('%d', t) end
  return string.format('%.17g', t)
end

-- `counted`: a fixed window's counted_against, or false (not recorded).
local function encode(v, ts, full, counted)
  local text
  if prints_as_integer(ts) and prints_as_integer(full) then
    text = string.format('%.17g %d %d', v, ts, full)
  else
    text = string.format('%.17g %.17g %.17g', v, ts, full)
  end
  if counted then text = text .. string.format(' %.17g', counted) end
  return text
end

-- The state's v, ts, full, counted (false when it has none).
local function decode(raw, key)
  local v, ts, full, counted
  local a = string.find(raw, ' ', 1, true)
  local b = a and string.find(raw, ' ', a + 1, true)
  if b then
    local c = string.find(raw, ' ', b + 1, true)
    v, ts = tonumber(string.sub(raw, 1, a - 1)), tonumber(string.sub(raw, a + 1, b - 1))
    if c then
      full = tonumber(string.sub(raw, b + 1, c - 1))
      counted = tonumber(string.sub(raw, c + 1))
      if counted == nil or not (counted > 0) or string.find(raw, ' ', c + 1, true) then
        full = nil
      end
    else
      full, counted = tonumber(string.sub(raw, b + 1)), false
    end
  end
  if v == nil or ts == nil or full == nil then
    error('ratelimit: unreadable state at ' .. key)
  end
  return v, ts, full, counted
end

-- Writes an encoded state that is full again at `full` (us), expiring at ceil(full / 1000) ms:
-- never before, at most a millisecond after. No expiry when `full` is never.
local function store(key, raw, full)
  if full >= BIG then
    redis.call('SET', key, raw)
    return
  end
  local rest = math.fmod(full, 1000)
  if rest < 0 then rest = rest + 1000 end
  local ms = (full - rest) / 1000
  if rest > 0 then ms = ms + 1 end
  if ms < 1 then ms = 1 end
  redis.call('SET', key, raw, 'PXAT', string.format('%d', ms))
end

local function arg_number(args, i, what)
  local x = tonumber(args[i])
  if x == nil then error('ratelimit: argument ' .. i .. ' (' .. what .. ') is not a number') end
  return x
end

-- The time of a decision: args[i] (microseconds) when given, else the primary's TIME.
local function decision_time(args, i)
  local now
  if args[i] == '' then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000000 + tonumber(time[2])
  else
    now = arg_number(args, i, 'now')
  end
  if not (now >= 0 and now < BIG) or now ~= math.floor(now) then
    error('ratelimit: time out of range')
  end
  return now
end

-- Decides and writes. With `first` (a table), records per key the balance the first limit on it
-- saw and that limit: first[k] = {v = balance, b = bucket, a = index of its arguments}.
local function apply(keys, args, first)
  local mode = args[1]
  if mode ~= 'c' and mode ~= 't' and mode ~= 'r' then error('ratelimit: bad mode') end
  local now = decision_time(args, 2)
  local n = arg_number(args, 3, 'limits')

  -- The reply, filled as it goes: {now, allowed, state read per key..., state written per key...}.
  -- The working state of key k is w[3k-2], w[3k-1], w[3k] (v, ts, full; v false for none) and
  -- counted[k].
  local nk = #keys
  local reply = {false, 0}
  local w = {}
  local counted = {}
  for k = 1, nk do
    local raw = redis.call('GET', keys[k])
    local j = 3 * k
    if raw then
      reply[2 + k] = raw
      w[j - 2], w[j - 1], w[j], counted[k] = decode(raw, keys[k])
    else
      reply[2 + k] = ''
      w[j - 2], w[j - 1], w[j], counted[k] = false, 0, 0, false
    end
  end

  local allowed = true
  local a = 4
  for _ = 1, n do
    if a + 7 > #args then error('ratelimit: wrong number of arguments') end
    local slot = arg_number(args, a, 'key index')
    if keys[slot] == nil then error('ratelimit: bad key index') end
    local kind = args[a + 1]
    if kind ~= 'b' and kind ~= 'w' and kind ~= 'B' and kind ~= 'W' then
      error('ratelimit: bad kind')
    end
    local b = kind == 'b' or kind == 'B'
    local rate = arg_number(args, a + 2, 'rate')
    local period = arg_number(args, a + 3, 'period')
    local cap = arg_number(args, a + 4, 'capacity')
    local offset = arg_number(args, a + 6, 'offset')
    local max_reserved = nil
    if args[a + 5] ~= '' then max_reserved = arg_number(args, a + 5, 'max_reserved') end
    local count = arg_number(args, a + 7, 'count')
    -- The override's adjustment: its effect, and for a fixed window the shift between the stored
    -- value (counted against base_capacity) and the value decided on.
    local effect, shift, cut = nil, 0, false
    local changed, before_rate, before_period, before_cap
    -- The capacity a fixed window's stored value is counted against: the configured one.
    local base = cap
    if kind == 'B' or kind == 'W' then
      if a + 13 > #args then error('ratelimit: wrong number of arguments') end
      effect = args[a + 8]
      if effect ~= 'l' and effect ~= 'u' and effect ~= 'x' then error('ratelimit: bad effect') end
      if args[a + 9] ~= '' then changed = arg_number(args, a + 9, 'changed_at') end
      before_rate = arg_number(args, a + 10, 'before_rate')
      before_period = arg_number(args, a + 11, 'before_period')
      before_cap = arg_number(args, a + 12, 'before_capacity')
      base = arg_number(args, a + 13, 'base_capacity')
      if not b then shift = cap - base end
      cut = cap < base
    end

    local j = 3 * slot
    if not b then
      -- Recounted: a fixed window's state counted against another capacity keeps its count.
      if base > 0 then
        local was = counted[slot]
        if w[j - 2] and was and was ~= base then
          local v = w[j - 2]
          w[j - 2] = max(v + (base - was), min(v, 0.0))
        end
        counted[slot] = base
      else
        counted[slot] = false
      end
    end
    local sv, sts = w[j - 2], w[j - 1]
    local ok = false
    if effect == 'u' or effect == 'x' then
      -- DecideFixed: nothing taken; a missing state is written as the full state it stands for.
      local v, ts = refill(b, rate, period, cap, offset, sv, sts, now)
      if first and first[slot] == nil then first[slot] = {v = v, b = b, a = a, fixed = true} end
      if effect == 'u' then
        ok = true
        if mode ~= 'c' and not sv then
          w[j - 2], w[j - 1], w[j] = v, ts, full_at(b, rate, period, cap, offset, v, ts)
        end
      end
    else
      -- AcrossChange.
      if effect and sv then
        if b then
          if changed and sts < changed then
            local bv, bts = refill(true, before_rate, before_period, before_cap, 0, sv, sts,
                                   changed)
            sv, sts = min(bv, cap), bts
          end
        else
          sv = max(sv + shift, min(sv, 0.0))
        end
      end
      local v, ts = refill(b, rate, period, cap, offset, sv, sts, now)
      if first and first[slot] == nil then first[slot] = {v = v, b = b, a = a} end
      local tol = TOLERANCE * max(cap, count)
      local value = v - count
      if covers(v, count, tol) then
        value = max(0.0, value)
        ok = true
      elseif mode == 'r' then
        local room = cap + (max_reserved or UNBOUNDED_RESERVE)
        if covers(room, count, tol) and
            (max_reserved == nil or covers(value, -max_reserved, tol)) then
          ok = true
        end
      end
      if ok and mode ~= 'c' then
        local full = full_at(b, rate, period, cap, offset, value, ts)
        if effect then
          -- Stored counted against the configured capacity; full under a cut is not full under
          -- the configured limit, so the state is kept until a later decision writes it again.
          value = value - shift
          if cut then full = NEVER end
        end
        w[j - 2], w[j - 1], w[j] = value, ts, full
      end
    end
    if first and first[slot] and first[slot].a == a then
      first[slot].shift, first[slot].cut, first[slot].adjusted = shift, cut, effect ~= nil
    end
    allowed = allowed and ok
    if effect then a = a + 14 else a = a + 8 end
  end
  if a ~= #args + 1 then error('ratelimit: wrong number of arguments') end

  reply[1] = time_text(now)
  if allowed then reply[2] = 1 end
  for k = 1, nk do
    local written = ''
    if allowed and mode ~= 'c' then
      local j = 3 * k
      written = encode(w[j - 2], w[j - 1], w[j], counted[k])
      store(keys[k], written, w[j])
    end
    reply[2 + nk + k] = written
  end
  return reply
end

-- FCALL ratelimit_compare_and_set <nkeys> <key>... <expected>... <new>...
-- When every key holds its expected state ('' for none), stores every new state ('' leaves the
-- key as it is) with its expiry, and returns 1; otherwise changes nothing and returns 0. The
-- states are the library's encoding. For decisions made outside the library.
local function compare_and_set(keys, args)
  local n = #keys
  if #args ~= 2 * n then error('ratelimit: wrong number of arguments') end
  for k = 1, n do
    if (redis.call('GET', keys[k]) or '') ~= args[k] then return 0 end
  end
  for k = 1, n do
    local raw = args[n + k]
    if raw ~= '' then store(keys[k], raw, select(3, decode(raw, keys[k]))) end
  end
  return 1
end

-- FCALL ratelimit_commit <nkeys> <state key>... <record key>... <nstates> <expected state>...
--   <new state>... <expected record>... <new record>... <record expiry ms>...
-- compare_and_set with idempotency records: when every state and every record holds its expected
-- bytes ('' for none), stores every new state ('' leaves it) with its expiry and every new record
-- ('' leaves it) with PXAT at its expiry (ms), and returns 1; otherwise changes nothing and
-- returns 0. For decisions made outside the library together with their records.
local function commit(keys, args)
  local n = arg_number(args, 1, 'states')
  local m = #keys - n
  if n < 0 or m < 0 or #args ~= 1 + 2 * n + 3 * m then
    error('ratelimit: wrong number of arguments')
  end
  for k = 1, n do
    if (redis.call('GET', keys[k]) or '') ~= args[1 + k] then return 0 end
  end
  for r = 1, m do
    if (redis.call('GET', keys[n + r]) or '') ~= args[1 + 2 * n + r] then return 0 end
  end
  for k = 1, n do
    local raw = args[1 + n + k]
    if raw ~= '' then store(keys[k], raw, select(3, decode(raw, keys[k]))) end
  end
  for r = 1, m do
    local raw = args[1 + 2 * n + m + r]
    if raw ~= '' then
      local at = arg_number(args, 1 + 2 * n + 2 * m + r, 'record expiry')
      redis.call('SET', keys[n + r], raw, 'PXAT', string.format('%.17g', max(1, at)))
    end
  end
  return 1
end

redis.register_function('ratelimit_apply', function(keys, args) return apply(keys, args) end)
redis.register_function('ratelimit_commit', function(keys, args) return commit(keys, args) end)
redis.register_function('ratelimit_compare_and_set',
                        function(keys, args) return compare_and_set(keys, args) end)
redis.register_function{
  function_name = 'ratelimit_version',
  callback = function() return LIBRARY_VERSION end,
  flags = {'no-writes'},
}
