-- The takes of a request whose keys span slots, remembered so that they can be refunded: the
-- second part of library `ratelimit`, assembled after ratelimit.lua, whose locals it uses (apply,
-- arg_number, decode, encode, store, full_at, min, max, NEVER); docs/redis.md describes it.

-- A hold, as take_into_hold writes it: one line per key ('\n' between lines), each the fields of
-- HOLD_FIELDS separated by '|' (a state's text has no '|'); with a kept reply, '\n=' and the
-- reply in JSON after the last line. Library version 6 and earlier wrote a JSON array of
-- objects with these fields ('[' first, the reply in the first object): still read, so that a
-- hold written before an upgrade is refunded or replayed by the new library. The last two fields
-- (since version 9) are those of a limit under an override: the shift of a fixed window's stored
-- value and whether the limit is cut ('1'), written only for such a limit; a line of any other
-- limit, as versions 7 and 8 wrote every line, ends before them.
local HOLD_FIELDS = {'pre', 'post', 'before', 'taken', 'b', 'rate', 'period', 'cap', 'offset',
                     'shift', 'cut'}
local OLD_HOLD_FIELDS = 9

-- The entries of a hold (one table per key, fields by name) and its kept reply's JSON (or nil).
local function read_hold(raw)
  if string.sub(raw, 1, 1) == '[' then
    local held = cjson.decode(raw)
    return held, held[1].reply
  end
  local body, reply = raw, nil
  local r = string.find(raw, '\n=', 1, true)
  if r then
    body = string.sub(raw, 1, r - 1)
    reply = string.sub(raw, r + 2)
  end
  local held, entry, field, pos = {}, {}, 1, 1
  while true do
    local sep = string.find(body, '[|\n]', pos)
    entry[HOLD_FIELDS[field]] = string.sub(body, pos, (sep or #body + 1) - 1)
    field = field + 1
    if sep == nil or string.sub(body, sep, sep) == '\n' then
      if field ~= #HOLD_FIELDS + 1 and field ~= OLD_HOLD_FIELDS + 1 then
        error('ratelimit: unreadable hold')
      end
      held[#held + 1] = entry
      entry, field = {}, 1
      if sep == nil then break end
    end
    pos = sep + 1
  end
  return held, reply
end

-- Part of a request whose keys span slots: one take per slot, each remembered under the
-- request's id so that it can be refunded, and so that a take arriving after its refund does
-- nothing.
--
-- FCALL ratelimit_take_held <nkeys> <key>... <hold key> <hold ttl_ms> <ratelimit_apply's args>
-- The hold key is in the slot of the keys. When it exists (the request was refunded, or this take
-- already ran) nothing happens and the reply is the error "HELD". Otherwise runs ratelimit_apply
-- on the keys and, when it took, records under the hold key for `ttl_ms` what each key was before
-- and after, the amount taken and the limit. Same reply as ratelimit_apply.
-- Runs ratelimit_apply (its args in `args`) on the keys and, when it took, records under `hold`
-- for `ttl` ms what each key was before and after, the amount taken and the limit (and, with
-- `keep_reply`, the reply itself, in the first key's entry). Returns ratelimit_apply's reply.
local function take_into_hold(keys, args, hold, ttl, keep_reply)
  local first = {}
  local reply = apply(keys, args, first)
  local n = #keys
  if reply[2] == 1 and args[1] ~= 'c' then
    local entries = {}
    for k = 1, n do
      local post = reply[2 + n + k]
      local f = first[k]
      local a = f.a
      -- What the take took, counted as the limit decides (a fixed window under an override
      -- stores its value shifted); an unlimited override takes nothing.
      local taken = 0
      if not f.fixed then
        local post_v = decode(post, keys[k])
        if f.shift ~= 0 then post_v = post_v + f.shift end
        taken = f.v - post_v
      end
      -- The fields of HOLD_FIELDS, in order; the limit as it came (rate, period, capacity,
      -- offset: numbers the refund reads back).
      local fields = {
        reply[2 + k], post, string.format('%.17g', f.v), string.format('%.17g', taken),
        f.b and '1' or '0', args[a + 2], args[a + 3], args[a + 4], args[a + 6]}
      if f.adjusted then
        fields[10], fields[11] = string.format('%.17g', f.shift), f.cut and '1' or '0'
      end
      entries[k] = table.concat(fields, '|')
    end
    local text = table.concat(entries, '\n')
    if keep_reply then text = text .. '\n=' .. cjson.encode(reply) end
    redis.call('SET', hold, text, 'PX', ttl)
  end
  return reply
end

local function take_held(keys, args)
  local hold = table.remove(keys)
  local ttl = arg_number(args, 1, 'hold ttl')
  if redis.call('EXISTS', hold) == 1 then return redis.error_reply('HELD request already settled') end
  table.remove(args, 1)
  return take_into_hold(keys, args, hold, ttl, false)
end

-- Part of a request with a request_id whose keys span slots: take_held under a hold key derived
-- from the request, so that a re-run of the request (its first run died before its answer was
-- recorded) finds the take and re-uses its answer instead of taking again.
--
-- FCALL ratelimit_take_recorded <nkeys> <key>... <hold key> <hold ttl_ms> <generation>
--   <ratelimit_apply's args>
-- When the hold records a take, returns that take's reply again (nothing is taken). When it says
-- "refunded:<g>": with g >= generation (a late take of a run the refund already settled) nothing
-- happens and the reply is the error "REFUNDED"; with g < generation (a later run of the request)
-- it takes afresh. Otherwise takes, remembering the reply with the take. Same reply as
-- ratelimit_apply.
local function take_recorded(keys, args)
  local hold = table.remove(keys)
  local ttl = arg_number(args, 1, 'hold ttl')
  local generation = arg_number(args, 2, 'generation')
  local raw = redis.call('GET', hold)
  if raw then
    local refunded = string.match(raw, '^refunded:(%d+)$')
    if refunded == nil then
      if string.sub(raw, 1, 8) == 'refunded' then
        return redis.error_reply('REFUNDED request already refunded')
      end
      local _, reply = read_hold(raw)
      return cjson.decode(reply)
    end
    if tonumber(refunded) >= generation then
      return redis.error_reply('REFUNDED request already refunded')
    end
  end
  table.remove(args, 1)
  table.remove(args, 1)
  return take_into_hold(keys, args, hold, ttl, true)
end

-- FCALL ratelimit_refund <nkeys> <key>... <hold key> <hold ttl_ms> [<generation>]
-- Undoes the take recorded under the hold key and marks the request refunded for `ttl_ms` (also
-- when its take has not arrived yet: it will do nothing); with a generation (a take of
-- ratelimit_take_recorded) the mark is "refunded:<generation>". A key nobody wrote since the take gets
-- its state back exactly. A key written since gets back what the take still withholds from it,
-- never more: the difference the take made shrinks only when the balance without it would have
-- hit capacity, which needs at most `before + refill - capacity` of refill (a token bucket); a
-- fixed window gets the amount back only within the window of the take. Returns 1 when a take
-- was refunded, 0 otherwise.
local function refund(keys, args)
  local hold = table.remove(keys)
  local ttl = arg_number(args, 1, 'hold ttl')
  local raw = redis.call('GET', hold)
  local mark = 'refunded'
  if args[2] then mark = 'refunded:' .. args[2] end
  redis.call('SET', hold, mark, 'PX', ttl)
  if not raw or string.sub(raw, 1, 8) == 'refunded' then return 0 end
  local held = read_hold(raw)
  for k = 1, #keys do
    local h = held[k]
    local cur = redis.call('GET', keys[k]) or ''
    if cur == h.post then
      if h.pre == '' then
        redis.call('DEL', keys[k])
      else
        store(keys[k], h.pre, select(3, decode(h.pre, keys[k])))
      end
    elseif cur ~= '' then
      local sv, sts, _, counted = decode(cur, keys[k])
      local _, post_ts = decode(h.post, keys[k])
      local b, rate, period = h.b == '1', tonumber(h.rate), tonumber(h.period)
      local cap, offset = tonumber(h.cap), tonumber(h.offset)
      -- A limit under an override: a fixed window's stored value is shifted from the one the
      -- limit decides on, and a cut limit's state never expires (as ratelimit_apply writes them).
      local shift, cut = tonumber(h.shift or '0'), h.cut == '1'
      local back = 0
      if b then
        local refilled = max(0, sts - post_ts) * rate / period
        back = tonumber(h.taken) - max(0, tonumber(h.before) + refilled - cap)
      elseif sts == post_ts then
        back = tonumber(h.taken)
      end
      if back > 0 then
        local v = min(sv + shift + back, cap)
        local full = full_at(b, rate, period, cap, offset, v, sts)
        if cut then full = NEVER end
        v = v - shift
        store(keys[k], encode(v, sts, full, counted), full)
      end
    end
  end
  return 1
end

redis.register_function('ratelimit_take_held', function(keys, args) return take_held(keys, args) end)
redis.register_function('ratelimit_take_recorded',
                        function(keys, args) return take_recorded(keys, args) end)
redis.register_function('ratelimit_refund', function(keys, args) return refund(keys, args) end)
