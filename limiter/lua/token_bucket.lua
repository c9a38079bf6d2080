-- token_bucket.lua: a bucket of `burst` permits refilled at `rate` per
-- interval, refilled lazily on each call. O(1) state.
--
-- KEYS[2]  state: "level:ts" — permits in use at time ts (microseconds).
--          Keeping permits in use (not a time) lets a rate change with
--          KEEPSTATE carry the used permits over to the new rate.
--
-- Written as functions of one limit's state S (new makes it), not
-- closures over it: one copy of them serves every limit of a call
-- (also.lua's names). scripts.go binds them to one S for the scripts
-- that call a limit's functions without it (stateLimit, oneState).
local function new(rate, interval, burst, keys)
  -- per_permit: microseconds to refill one permit; level: permits in use
  return {capacity = burst, burst = burst, per_permit = interval / rate, keys = keys, level = 0}
end

local function load(S)
  S.level = bucket_load(S)
end

local function save(S)
  bucket_save(S, S.level)
end

local function available(S)
  return max(0, S.burst - S.level)
end

-- A request that may wait books permits ahead: the level may go above
-- burst by what refills within the wait, and the grant takes effect once
-- the level is back at burst. Later requests queue behind it (FIFO).
local function try(S, n, wait_us)
  local level, burst, per_permit = S.level, S.burst, S.per_permit
  local over = (level + n - burst) * per_permit -- time until n fit
  if level + n <= burst + EPS or over <= wait_us then
    level = level + n
    S.level = level
    return 1, max(0, burst - level), max(0, over), level * per_permit
  end
  return 0, max(0, burst - level), over, level * per_permit
end

-- Grants as many of count requests of n permits (that do not wait) as
-- fit, at once; the same as calling try(n, 0) until one is denied.
local function try_run(S, n, count)
  local level, burst, per_permit = S.level, S.burst, S.per_permit
  local g = max(0, min(count, floor((burst - level + EPS) / n)))
  if g == 0 then
    return 0, 0, 0, 0
  end
  local first_rem, first_reset = burst - level - n, (level + n) * per_permit
  S.level = level + g * n
  return g, first_rem, first_reset, S.level * per_permit
end

-- Past burst is debt: it refills before anything is available again.
local function charge(S, n)
  local level, burst, per_permit = S.level, S.burst, S.per_permit
  level = max(level, min(level + n, max(burst, MAX_DEBT_US / per_permit)))
  S.level = level
  return burst - level, level * per_permit
end

-- Microseconds until the bucket is full again.
local function reset_us(S)
  return S.level * S.per_permit
end

local function give(S, n)
  S.level = max(0, S.level - n)
end

