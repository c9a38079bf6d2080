-- cell.lua: redis-cell's CL.THROTTLE (GCRA), reproduced step by step from
-- the module's source (RateLimiter::rate_limit and the command's reply, as
-- fixed in 0.2.2 for rates above one per second), so that applications
-- written for the module get the same answers. A standalone script: it
-- has no config hash and is not built from prelude.lua and epilogue.lua.
--
-- KEYS[1]  state: "gcra:" and the theoretical arrival time (TAT) as integer
--          nanoseconds since the epoch (redis-cell stores the number bare;
--          the tag tells a GCRA state from an application's string);
--          TTL = reset_after.
-- ARGV     max_burst, emission interval (whole nanoseconds: the period
--          divided by count, as limiter.Throttle computes it), quantity
--          (0 = peek), strict ("1": the key is named by the client, so a
--          string that is not a GCRA state answers WRONGTYPE; "0": it is
--          rlproxy's own, and an untagged state of an earlier build counts
--          as none)
-- Reply    {limited (0|1), limit (max_burst + 1), remaining,
--           retry_after_s (-1 when allowed), reset_after_s}
--
-- redis-cell works in nanoseconds. Lua numbers are doubles, so every time
-- here is kept relative to now (exact up to 2^53 ns, about 104 days; past
-- that rounded to the nearest representable double, under a microsecond
-- at the longest refill allowed, 100 years), and the absolute TAT is read
-- and written as a seconds part and a nanoseconds part.
local max_burst = tonumber(ARGV[1])
local emission = tonumber(ARGV[2])
local quantity = tonumber(ARGV[3] or '1')
local strict = ARGV[4] == '1'

if not emission or emission <= 0 then
  return redis.error_reply('ERR Cell error: Zero rates are not supported')
end
-- The caller checks this (limiter.MaxThrottleFill); a TAT further out
-- would not fit the integer arithmetic of SET PX and the reply.
if emission * (max_burst + 1) > 36500 * 86400 * 1e9 then
  return redis.error_reply('ERR a full burst would take more than 36500 days to refill')
end
local dvt = emission * (max_burst + 1) -- delay variation tolerance
local increment = emission * quantity
local limit = max_burst + 1

-- Time comes from this Redis server.
local clock = redis.call('TIME')
local now_s, now_ns = tonumber(clock[1]), tonumber(clock[2]) * 1000

-- tat: the stored TAT minus now. A TAT already past counts as a missing
-- key (redis-cell's key expires no later than its TAT, so it never sees
-- one), which also keeps a clock stepping back from rewinding the state.
local tat = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local s, ns = string.match(stored, '^gcra:(%d+)(%d%d%d%d%d%d%d%d%d)$')
  if s then
    tat = math.max(0, (tonumber(s) - now_s) * 1e9 + (tonumber(ns) - now_ns))
  elseif strict then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
end

local new_tat = tat + increment
local diff = dvt - new_tat -- now - allow_at
local limited, retry_after, ttl = 0, -1e9, 0
if diff < 0 then
  limited = 1
  if increment <= dvt then retry_after = -diff end
  ttl = tat
else
  ttl = new_tat
  if ttl > 0 then
    local total = now_ns + new_tat
    local carry = math.floor(total / 1e9)
    local frac = total - carry * 1e9
    -- Past 2^53 ns the split may round out of [0, 1e9): carry it over.
    if frac < 0 then
      carry, frac = carry - 1, frac + 1e9
    elseif frac >= 1e9 then
      carry, frac = carry + 1, frac - 1e9
    end
    local value = string.format('gcra:%d%09d', now_s + carry, frac)
    -- Rounded up to whole milliseconds, so the TAT is never lost early.
    redis.call('SET', KEYS[1], value, 'PX', math.ceil(ttl / 1e6))
  else
    redis.call('DEL', KEYS[1])
  end
end

local function trunc(x)
  if x < 0 then return math.ceil(x) end
  return math.floor(x)
end

-- remaining: whole emission intervals left in the tolerance, computed from
-- whole microseconds as redis-cell does (from nanoseconds when the emission
-- interval is under a microsecond, where redis-cell divides by zero).
local remaining = 0
local room = dvt - ttl
if room > -emission then
  local em_us = math.floor(emission / 1000)
  if em_us > 0 then
    remaining = trunc(trunc(room / 1000) / em_us)
  else
    remaining = trunc(room / emission)
  end
end

-- Durations in whole seconds, plus one when at least a millisecond is
-- left over, so a caller never comes back too early.
local function seconds(d)
  local s = trunc(d / 1e9)
  if trunc((d - s * 1e9) / 1e6) > 0 then s = s + 1 end
  return s
end

return {limited, limit, remaining, seconds(retry_after), seconds(ttl)}
