-- token_bucket.lua: a bucket of `burst` permits refilled at `rate` per
-- interval, refilled lazily on each call. O(1) state.
--
-- KEYS[2]  state: "level:ts" — permits in use at time ts (microseconds).
--          Keeping permits in use (not a time) lets a rate change with
--          KEEPSTATE carry the used permits over to the new rate.
local capacity = burst
local per_permit = interval / rate -- microseconds to refill one permit
local level, ts

local function load()
  level, ts = 0, now
  local v = redis.call('GET', KEYS[2])
  if v then
    local l, t = string.match(v, '^([^:]+):(.+)$')
    level, ts = tonumber(l) or 0, tonumber(t) or now
  end
  -- The clock may step back after a failover; time never runs backwards here.
  if now > ts then
    level = math.max(0, level - (now - ts) / per_permit)
    ts = now
  end
end

local function available()
  return math.max(0, burst - level)
end

local function try(n)
  if level + n <= burst + EPS then
    level = level + n
    return 1, available(), 0, level * per_permit
  end
  return 0, available(), (level + n - burst) * per_permit, level * per_permit
end

local function give(n)
  level = math.max(0, level - n)
end

local function save()
  if level <= EPS then
    redis.call('DEL', KEYS[2])
  else
    keep(KEYS[2], num(level) .. ':' .. num(ts), level * per_permit)
  end
end
