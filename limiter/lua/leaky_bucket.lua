-- leaky_bucket.lua: a shaper (the leaky bucket as a queue, like Guava's
-- RateLimiter.acquire or a queue consumer). Grants leave evenly spaced,
-- one permit every T = interval / rate; the bucket holds the permits
-- granted but not yet leaked, at most `burst`. O(1) state.
--
-- A request for n permits takes the next free slot and holds the bucket
-- for n * T from there:
--   - without a wait it is granted only when the bucket is empty (the slot
--     is now): strictly spaced grants, no burst of requests;
--   - with a wait (wait_us > 0) it is booked as a reservation when its slot
--     comes within the wait and the bucket has room for its n permits
--     (queued + n <= burst): granted, with retry_after = time to its slot.
-- A denial's retry_after is the time until the bucket is empty, when the
-- same request would be granted without waiting (as token-bucket's is).
--
-- Permits "available" are what one request could take right now without
-- waiting: all `burst` when the bucket is empty, else none. (A shaper has
-- no store of unused time: an idle bucket grants the next request at once,
-- and the one after it waits.) So remaining is 0 after any grant, and
-- reset_after is the time until the bucket has drained.
--
-- KEYS[2]  state: "queued:ts" — permits in the bucket at time ts
--          (microseconds). Keeping permits (not a time) lets a rate change
--          with KEEPSTATE carry them over to the new rate.
local capacity = burst
local per_permit = interval / rate -- T, microseconds
local level -- permits queued
local load_level, save_level = bucket(KEYS, per_permit)

local function load()
  level = load_level()
end

local function save()
  save_level(level)
end

local function empty()
  return level <= EPS
end

local function available()
  if empty() then return burst end
  return 0
end

local function try(n, wait_us)
  if empty() then
    level = level + n
    return 1, available(), 0, level * per_permit
  end
  local wait = level * per_permit -- until this request's slot
  if wait_us > 0 and wait <= wait_us and level + n <= burst + EPS then
    level = level + n
    return 1, available(), wait, level * per_permit
  end
  return 0, available(), max(1, wait), level * per_permit
end

-- Queues n permits whatever the bucket holds: past burst is debt, which
-- leaks before anything is granted again. remaining is 0 after a grant,
-- below 0 by the debt.
local function charge(n)
  level = max(level, min(level + n, max(burst, MAX_DEBT_US / per_permit)))
  return min(0, burst - level), level * per_permit
end

local function give(n)
  level = max(0, level - n)
end
