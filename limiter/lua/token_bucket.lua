-- token_bucket.lua: a bucket of `burst` permits refilled at `rate` per
-- interval, refilled lazily on each call. O(1) state.
--
-- KEYS[2]  state: "level:ts" — permits in use at time ts (microseconds).
--          Keeping permits in use (not a time) lets a rate change with
--          KEEPSTATE carry the used permits over to the new rate.
local capacity = burst
local per_permit = interval / rate -- microseconds to refill one permit
local level -- permits in use
local load_level, save_level = bucket(KEYS, per_permit)

local function load()
  level = load_level()
end

local function save()
  save_level(level)
end

local function available()
  return max(0, burst - level)
end

-- A request that may wait books permits ahead: the level may go above
-- burst by what refills within the wait, and the grant takes effect once
-- the level is back at burst. Later requests queue behind it (FIFO).
local function try(n, wait_us)
  local over = (level + n - burst) * per_permit -- time until n fit
  if level + n <= burst + EPS or over <= wait_us then
    level = level + n
    return 1, available(), max(0, over), level * per_permit
  end
  return 0, available(), (level + n - burst) * per_permit, level * per_permit
end

-- Grants as many of count requests of n permits (that do not wait) as
-- fit, at once; the same as calling try(n, 0) until one is denied.
local function try_run(n, count)
  local g = max(0, min(count, floor((burst - level + EPS) / n)))
  if g == 0 then
    return 0, 0, 0, 0
  end
  local first_rem, first_reset = burst - level - n, (level + n) * per_permit
  level = level + g * n
  return g, first_rem, first_reset, level * per_permit
end

-- Past burst is debt: it refills before anything is available again.
local function charge(n)
  level = max(level, min(level + n, max(burst, MAX_DEBT_US / per_permit)))
  return burst - level, level * per_permit
end

-- Microseconds until the bucket is full again.
local function reset_us()
  return level * per_permit
end

local function give(n)
  level = max(0, level - n)
end
