
-- Concurrency limits in the function library: storage/leases/lease.h DecideLease, decided at the
-- primary's TIME, with the rate limits of an acquire in the same call (all-or-nothing). This file
-- is the third part of library `ratelimit` (assembled after ratelimit.lua and holds.lua; it uses
-- ratelimit.lua's locals: apply, arg_number, decision_time, time_text, BIG); docs/leases.md and
-- docs/redis.md describe it.
--
-- A key's lease set lives in two Redis keys of its state's slot (redis_lease_library.h):
--   the expiries, a sorted set: member the lease id, score its expires_at_us;
--   the leases, a hash: lease id -> "<count> <acquired_at_us> <expires_at_us> <released 0|1>
--     <request_id length>:<request_id><holder>"; 'r:' .. request_id -> the id of its lease;
--     '#' -> the slots of the leases not released (expired ones included until dropped).
-- Every call costs O(log n) in the set's n leases, plus O(1) per expired lease it drops, per
-- lease a kList reads (those from its page's place to its end, and the rest of the last expiry's
-- ties) and per lease a denial's retry_at passes. Both keys expire (PEXPIREAT)
-- KEEP_AFTER_EXPIRY_US after the latest expiry of the set, so an idle set disappears by itself.
--
-- FCALL ratelimit_lease <nkeys> <expiries key> <leases key> <rate key>... <action> <now_us or ''>
--   <capacity> <count> <ttl_us> <lease id> <request_id> <holder> <nlimits> <limit>...
--   [a list's page, after its 0 limits: <after expires_at_us> <after acquired_at_us> <after id or
--   ''> <limit, 0: every lease>; absent: every lease]
-- action: 'a' acquire, 'r' release, 'e' extend, 'c' check, 'l' list, 'x' reset. The limits (an
-- acquire only) are ratelimit_apply's, their key indices counting from the first rate key: with
-- the lease allowed they are taken (mode 't'), otherwise only read (mode 'c', as for a replay,
-- which reports their balances now); the lease set is written only when they all allow.
-- Returns {now, allowed 0|1, reason ''|'n' no free slots|'c' count exceeds capacity,
--   state 'h' held|'r' released|'n' not held, replayed 0|1, held, free, retry_at or '',
--   expired_unreleased, wrote 0|1, the lease ('' or "<id> <lease text>"),
--   {"<id> <lease text>"... of a list, soonest expiry first}, ratelimit_apply's reply or {}}.

local LEASE_BATCH = 256
-- A set's keys outlive its latest expiry by this long (as the RocksDB store keeps a lease's
-- record, kLeaseRecordMarginMicros: a minute), so that a decision, or the leak sweep's, still
-- finds the leases that expired unreleased and counts them.
local KEEP_AFTER_EXPIRY_US = 60000000

local function lease_text(count, acquired, expires, released, request_id, holder)
  return string.format('%d %d %d %d %d:', count, acquired, expires, released and 1 or 0,
                       #request_id) .. request_id .. holder
end

-- count, acquired, expires, released, request_id, holder.
local function lease_fields(raw)
  if not raw then error('ratelimit: a lease of the set is missing') end
  local count, acquired, expires, released, n, at =
      string.match(raw, '^(%d+) (%d+) (%d+) ([01]) (%d+):()')
  if not count then error('ratelimit: unreadable lease') end
  n = tonumber(n)
  return tonumber(count), tonumber(acquired), tonumber(expires), released == '1',
      string.sub(raw, at, at + n - 1), string.sub(raw, at + n)
end

-- The raw leases of `ids` (HMGET in batches: a reply never needs more stack than a batch).
local function leases_of(h, ids)
  local out = {}
  for from = 1, #ids, LEASE_BATCH do
    local raws = redis.call('HMGET', h, unpack(ids, from, math.min(#ids, from + LEASE_BATCH - 1)))
    for i = 1, #raws do out[from + i - 1] = raws[i] end
  end
  return out
end

-- Calls visit(id, raw) for the leases expiring after `now`, soonest first, until it returns true;
-- from `from` on when given (a ZRANGEBYSCORE bound later than now).
local function each_live(z, h, now, visit, from)
  local offset = 0
  while true do
    local ids = redis.call('ZRANGEBYSCORE', z, from or '(' .. time_text(now), '+inf', 'LIMIT',
                           offset, LEASE_BATCH)
    if #ids == 0 then return end
    local raws = leases_of(h, ids)
    for i = 1, #ids do
      if visit(ids[i], raws[i]) then return end
    end
    offset = offset + #ids
  end
end

-- A lease id names a lease field of the hash only when it is none of the other fields.
local function is_lease_id(id)
  return id ~= '' and id ~= '#' and string.sub(id, 1, 2) ~= 'r:'
end

local function lease(keys, args)
  local z, h = keys[1], keys[2]
  local action = args[1]
  if action ~= 'a' and action ~= 'r' and action ~= 'e' and action ~= 'c' and action ~= 'l' and
      action ~= 'x' then
    error('ratelimit: bad lease action')
  end
  local now = decision_time(args, 2)
  local cap = arg_number(args, 3, 'capacity')
  local count = arg_number(args, 4, 'count')
  local ttl = arg_number(args, 5, 'ttl')
  local id, request_id, holder = args[6], args[7], args[8]
  local nlimits = arg_number(args, 9, 'limits')
  if not (cap >= 1) or not (count >= 1) or not (ttl >= 0) or now + ttl >= BIG then
    error('ratelimit: bad lease arguments')
  end
  if nlimits > 0 and action ~= 'a' then error('ratelimit: limits go with an acquire only') end

  -- The leases found expired: dropped by a decision that writes, counted by every one.
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', time_text(now))
  local expired_raw = leases_of(h, expired)
  local held = tonumber(redis.call('HGET', h, '#') or '0')
  local expired_unreleased = 0
  for i = 1, #expired do
    local c, _, _, released = lease_fields(expired_raw[i])
    if not released then
      expired_unreleased = expired_unreleased + 1
      held = held - c
    end
  end

  local allowed, reason, state, replayed, retry_at = 1, '', 'n', 0, ''
  local lease_reply, listed, rates = '', {}, {}
  local write = false
  -- The change a writing decision makes once the expired leases are dropped.
  local change = nil

  if action == 'a' or action == 'c' then
    local replay_id = nil
    if action == 'a' and request_id ~= '' then
      replay_id = redis.call('HGET', h, 'r:' .. request_id)
    end
    local replay_raw = replay_id and redis.call('HGET', h, replay_id)
    if replay_raw and select(3, lease_fields(replay_raw)) > now then
      replayed = 1
      lease_reply = replay_id .. ' ' .. replay_raw
    elseif count > cap then
      allowed, reason = 0, 'c'
    elseif held + count <= cap then
      if action == 'a' then
        if not is_lease_id(id) or redis.call('HEXISTS', h, id) == 1 then
          error('ratelimit: bad lease id')
        end
        local raw = lease_text(count, now, now + ttl, false, request_id, holder)
        lease_reply = id .. ' ' .. raw
        write = true
        change = function()
          redis.call('ZADD', z, now + ttl, id)
          redis.call('HSET', h, id, raw)
          if request_id ~= '' then redis.call('HSET', h, 'r:' .. request_id, id) end
          held = held + count
        end
      end
    else
      allowed, reason = 0, 'n'
      -- The expiry that brings the slots held down to capacity - count.
      local to_free = held - (cap - count)
      each_live(z, h, now, function(_, raw)
        local c, _, e, released = lease_fields(raw)
        if released then return false end
        to_free = to_free - c
        if to_free <= 0 then
          retry_at = time_text(e)
          return true
        end
        return false
      end)
    end
    if action == 'a' and nlimits > 0 then
      -- Taken with the slots; only read ('c') when the slots are refused, or for a replay, which
      -- reports the balances as they are now and takes nothing again.
      local take = allowed == 1 and replayed == 0
      local rate_keys = {}
      for k = 3, #keys do rate_keys[#rate_keys + 1] = keys[k] end
      local rate_args = {take and 't' or 'c', time_text(now)}
      for i = 9, #args do rate_args[#rate_args + 1] = args[i] end
      rates = apply(rate_keys, rate_args)
      if replayed == 0 and rates[2] ~= 1 then
        write, change, lease_reply = false, nil, ''
      end
    end
  elseif action == 'r' or action == 'e' then
    local raw = is_lease_id(id) and redis.call('HGET', h, id)
    if raw then
      local c, acquired, e, released, rid, who = lease_fields(raw)
      if not released and e > now then
        write = true
        if action == 'r' then
          state = 'r'
          change = function()
            held = held - c
            -- Kept, released, until its expiry when a retried acquire may ask for it again.
            if rid ~= '' then
              redis.call('HSET', h, id, lease_text(c, acquired, e, true, rid, who))
            else
              redis.call('ZREM', z, id)
              redis.call('HDEL', h, id)
            end
          end
        else
          state = 'h'
          local extended = lease_text(c, acquired, now + ttl, false, rid, who)
          lease_reply = id .. ' ' .. extended
          change = function()
            redis.call('ZADD', z, now + ttl, id)
            redis.call('HSET', h, id, extended)
          end
        end
      end
    end
  elseif action == 'l' then
    -- Soonest expiry first; ties: earlier acquired, then id (as lease_algebra.cc orders them).
    -- With a page: the leases after its place, read from its expiry on, until `limit` of them
    -- are found and the ties of the last one's expiry with them; sorted, the first `limit`
    -- and one more (which tells the server more follow) are returned.
    local after_e, after_acquired, after_id, limit = nil, nil, args[12], 0
    if args[13] then
      after_e = arg_number(args, 10, 'after expiry')
      after_acquired = arg_number(args, 11, 'after acquisition')
      limit = arg_number(args, 13, 'page limit')
    end
    local function is_after(e, acquired, lid)
      if not after_id or after_id == '' then return true end
      if e ~= after_e then return e > after_e end
      if acquired ~= after_acquired then return acquired > after_acquired end
      return lid > after_id
    end
    local from = nil
    if after_id and after_id ~= '' and after_e > now then from = time_text(after_e) end
    local order, last_e = {}, nil
    each_live(z, h, now, function(lid, raw)
      local _, acquired, e, released = lease_fields(raw)
      if last_e and e > last_e then return true end
      if not released and is_after(e, acquired, lid) then
        order[#order + 1] = {e, acquired, lid, raw}
        if limit > 0 and #order == limit + 1 then last_e = e end
      end
      return false
    end, from)
    table.sort(order, function(x, y)
      if x[1] ~= y[1] then return x[1] < y[1] end
      if x[2] ~= y[2] then return x[2] < y[2] end
      return x[3] < y[3]
    end)
    local n = #order
    if limit > 0 and n > limit + 1 then n = limit + 1 end
    for i = 1, n do listed[i] = order[i][3] .. ' ' .. order[i][4] end
  else
    write = true
    change = function()
      redis.call('DEL', z, h)
      held = 0
    end
  end

  -- Leases found expired unreleased are dropped by the decision that finds them, whatever it was
  -- asked: each is counted once (expired_unreleased, the leak detector), by that decision.
  if expired_unreleased > 0 and not write then
    write = true
    change = function() end
  end

  if write then
    -- Drop the expired leases (and the request_id of each, unless it names a newer lease).
    if #expired > 0 then
      for i = 1, #expired do
        local rid = select(5, lease_fields(expired_raw[i]))
        if rid ~= '' and redis.call('HGET', h, 'r:' .. rid) == expired[i] then
          redis.call('HDEL', h, 'r:' .. rid)
        end
      end
      for from = 1, #expired, LEASE_BATCH do
        redis.call('HDEL', h, unpack(expired, from, math.min(#expired, from + LEASE_BATCH - 1)))
      end
      redis.call('ZREMRANGEBYSCORE', z, '-inf', time_text(now))
    end
    change()
    local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
    if #last == 0 then
      redis.call('DEL', z, h)
    else
      redis.call('HSET', h, '#', string.format('%d', held))
      local at = string.format('%d',
                               math.ceil((tonumber(last[2]) + KEEP_AFTER_EXPIRY_US) / 1000))
      redis.call('PEXPIREAT', z, at)
      redis.call('PEXPIREAT', h, at)
    end
  end

  if held < 0 then held = 0 end
  local free = cap - held
  if free < 0 then free = 0 end
  return {time_text(now), allowed, reason, state, replayed, held, free, retry_at,
          expired_unreleased, write and 1 or 0, lease_reply, listed, rates}
end

redis.register_function('ratelimit_lease', function(keys, args) return lease(keys, args) end)
