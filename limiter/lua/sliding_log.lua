-- sliding_log.lua: Redisson RRateLimiter semantics. Every grant is recorded
-- with its permits; a grant older than the interval gives its permits back.
-- Grants in the same millisecond share one entry, so the log holds at most
-- one entry per millisecond of the interval, whatever the request rate.
--
-- KEYS[2]  sorted set of grants: member "<us>:<permits>", score <ms>: the
--          entry's millisecond, and in the member the microsecond of its
--          latest grant, which leaves the window exactly one interval
--          later (with the millisecond alone, a grant at m.999 would leave
--          at m + interval, having counted 0.999 ms less than a whole
--          interval, and rate + 1 grants could fit in one). A member
--          written by an older rlproxy, "<ms>:<permits>", counts as
--          granted at the end of its millisecond.
-- KEYS[3]  permits used by the grants in the window (a plain counter)
local capacity = rate
local window = interval / 1000 -- milliseconds
local now_ms = floor(now / 1000)
local now_us = now
local used

local function permits_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- The number before an entry's colon: the microsecond of its latest
-- grant, or (below 1e14) the millisecond of an older rlproxy's entry.
local function stamp_of(member)
  return tonumber(string.match(member, '^(%d+):'))
end

-- The microsecond of an entry's latest grant (an older rlproxy's entry:
-- the end of its millisecond).
local function granted_at(member)
  local t = stamp_of(member)
  if t < 1e14 then return (t + 1) * 1000 end
  return t
end

local function load()
  now_us = now
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1)
  -- The clock may step back after a failover; time never runs backwards
  -- here (past the newest grant, or the start of an older rlproxy's ms).
  if newest[1] then
    local t = stamp_of(newest[1])
    if t < 1e14 then t = t * 1000 end
    if t > now_us then now_us = t end
  end
  now_ms = floor(now_us / 1000)
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
  -- Entries of milliseconds before now_ms - window have left the window;
  -- one of that millisecond has when its latest grant has.
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms - window)
  if #old > 0 then
    local last = old[#old]
    if granted_at(last) + interval <= now_us then
      redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - window)
    else
      old[#old] = nil
      redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - window - 1)
    end
    for _, m in ipairs(old) do
      used = used - permits_of(m)
    end
  end
  if used < 0 then used = 0 end
end

local function available()
  return max(0, rate - used)
end

-- Microseconds until the window is empty again.
local function until_empty()
  if used <= 0 then return 0 end
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if not newest[2] then return 0 end
  return max(0, granted_at(newest[1]) + interval - now_us)
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
        return max(0, granted_at(batch[i]) + interval - now_us)
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
  redis.call('ZADD', KEYS[2], now_ms, string.format('%d:%d', now_us, permits))
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
    local back = min(p, n)
    if p > back then
      redis.call('ZADD', KEYS[2], newest[2], string.format('%d:%d', stamp_of(newest[1]), p - back))
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
  redis.call('PEXPIRE', KEYS[2], max(1, ms(ttl)))
end
