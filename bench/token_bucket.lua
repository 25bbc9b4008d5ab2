-- A plain token bucket in Redis, the baseline users write by hand, for scripts/bench-redis.sh
-- (redis-benchmark EVALSHA). Not part of the server.
-- KEYS[1]: the bucket, a hash {tokens, ts}. ARGV: rate (tokens per second), capacity, count.
-- Takes `count` tokens when there are enough; returns 1 when allowed, 0 when denied.
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens')) or capacity
local ts = tonumber(redis.call('HGET', KEYS[1], 'ts')) or now
if now > ts then tokens = math.min(capacity, tokens + (now - ts) * rate / 1e6) end
local allowed = 0
if tokens >= count then
  tokens = tokens - count
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], 3600000)
return allowed
