-- sliding_log.lua: Redisson RRateLimiter semantics. Every grant is recorded
-- with its permits; a grant older than the interval gives its permits back.
-- Grants in the same millisecond share one entry, so the log holds at most
-- one entry per millisecond of the interval, whatever the request rate.
-- An entry of millisecond m leaves the window at m + window + 1: its grant
-- came at some time in [m, m + 1), and must count for a whole interval
-- after it (leaving at m + window, a grant at m.999 would count for
-- 499.001 ms of a 500 ms window, and 11 grants could fit in one of 10).
--
-- KEYS[2]  sorted set of grants: member "<ms>:<permits>", score <ms>
-- KEYS[3]  permits used by the grants in the window (a plain counter)
local capacity = rate
local window = interval / 1000 -- milliseconds
local now_ms = math.floor(now / 1000)
local used

local function permits_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local function load()
  now_ms = math.floor(now / 1000)
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  -- The clock may step back after a failover; time never runs backwards here.
  if newest[2] and tonumber(newest[2]) > now_ms then
    now_ms = tonumber(newest[2])
  end
  local counter = redis.call('GET', KEYS[3])
  if counter then
    used = tonumber(counter)
  else
    -- The counter expired apart from the log (or never existed): recount.
    used = 0
    for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      used = used + permits_of(m)
    end
  end
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms - window - 1)
  if #old > 0 then
    for _, m in ipairs(old) do
      used = used - permits_of(m)
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - window - 1)
  end
  if used < 0 then used = 0 end
end

local function available()
  return math.max(0, rate - used)
end

-- Microseconds until the window is empty again.
local function until_empty()
  if used <= 0 then return 0 end
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if not newest[2] then return 0 end
  return (tonumber(newest[2]) + window + 1 - now_ms) * 1000
end

-- Microseconds until enough of the oldest grants leave the window to free
-- `need` permits.
local function until_freed(need)
  local freed, start = 0, 0
  while true do
    local batch = redis.call('ZRANGE', KEYS[2], start, start + 63, 'WITHSCORES')
    if #batch == 0 then return until_empty() end
    for i = 1, #batch, 2 do
      freed = freed + permits_of(batch[i])
      if freed >= need then
        return (tonumber(batch[i + 1]) + window + 1 - now_ms) * 1000
      end
    end
    start = start + 64
  end
end

-- Records a grant of n permits now.
local function record(n)
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local permits = n
  if newest[2] and tonumber(newest[2]) == now_ms then
    permits = permits + permits_of(newest[1])
    redis.call('ZREM', KEYS[2], newest[1])
  end
  redis.call('ZADD', KEYS[2], now_ms, now_ms .. ':' .. string.format('%d', permits))
  used = used + n
end

local function try(n, _)
  if used + n > rate then
    return 0, available(), until_freed(used + n - rate), until_empty()
  end
  record(n)
  return 1, available(), 0, until_empty()
end

local reset_us = until_empty

-- A charge is a grant that may take the log past rate: the debt lasts
-- until the charge leaves the window (the log's own rule: at most rate
-- within any window).
local function charge(n)
  record(n)
  return rate - used, until_empty()
end

-- Gives permits back by shrinking the newest grants first.
local function give(n)
  while n > 0 and used > 0 do
    local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if not newest[1] then break end
    local p = permits_of(newest[1])
    redis.call('ZREM', KEYS[2], newest[1])
    local back = math.min(p, n)
    if p > back then
      redis.call('ZADD', KEYS[2], newest[2], newest[2] .. ':' .. string.format('%d', p - back))
    end
    used = used - back
    n = n - back
  end
  if used < 0 then used = 0 end
end

local function save()
  local ttl = until_empty()
  if ttl <= 0 then
    redis.call('DEL', KEYS[2], KEYS[3])
    return
  end
  keep(KEYS[3], used, ttl)
  redis.call('PEXPIRE', KEYS[2], math.max(1, ms(ttl)))
end
