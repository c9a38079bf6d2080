-- sliding_window.lua: the weighted two-window counter (as in Cloudflare's
-- and nginx's limiters). Windows are aligned like fixed-window's; the
-- permits counted in the previous window weigh in proportion to how much
-- of it still overlaps the sliding interval that ends now:
--
--   estimate = prev * (1 - elapsed / interval) + cur
--
-- where elapsed is the time since the current window started. A request
-- for n is granted when estimate + n <= rate. O(1) state.
--
-- KEYS[2]  state: "start:prev:cur" — permits counted in the window that
--          starts at `start` (microseconds since the epoch) and in the one
--          before it.
--
-- The estimate cannot book permits ahead, so wait_us is ignored.
--
-- A count above rate is debt (RL.CHARGE): when a window ends, at most
-- `rate` of its count becomes the previous window's and the rest is
-- carried into the new window's count, so the debt is paid back at
-- `rate` per window.
local capacity = rate
local start, prev, cur
local stored -- the state as read, when it is this window's: "start:prev:cur" (or packed)

local function load()
  start, prev, cur, stored = window_of(now, interval), 0, 0, nil
  local v = get(KEYS[2])
  if not v then return end
  local s, p, c = read3(v)
  if not (s and p and c) then return end
  s = window_of(s, interval) -- a state written under another interval (KEEPSTATE)
  -- The clock may step back after a failover; time never runs backwards here.
  if s > start then
    now, start = s, s
  end
  if s == start then
    prev, cur = p, c
    stored = v
  elseif s < start then
    -- k windows have ended since: each moved at most rate of the count on.
    local k = floor((start - s) / interval + 0.5)
    cur = max(0, c - k * rate)
    prev = min(rate, max(0, c - (k - 1) * rate))
  end
end

-- The weight of the previous window now, in (0, 1].
local function weight()
  return 1 - (now - start) / interval
end

local function estimate()
  return prev * weight() + cur
end

local function available()
  return max(0, rate - estimate())
end

-- Microseconds until the estimate is zero: the current window's permits
-- weigh until the end of the next window, the previous window's until the
-- end of this one.
local function until_reset()
  if cur > EPS then return start + (ceil(cur / rate - EPS) + 1) * interval - now end
  if prev > EPS then return start + interval - now end
  return 0
end

-- Microseconds until a request for n would be granted, when it is not now.
-- Within this window only prev's weight falls; from the next window on,
-- this window's permits (cur) become the falling part, and they are gone
-- at the end of the next window, so n <= rate always fits by then.
local function until_fits(n)
  local room = rate - n - cur -- what prev's weighted part may still hold
  local at
  if room >= 0 and prev > 0 then
    at = start + interval * (1 - room / prev)
  else
    -- The first window j after this one whose own count (what debt is
    -- carried into it) leaves room for n, then the moment in it when the
    -- window before it weighs little enough.
    local j = max(1, ceil((cur + n - rate) / rate - EPS))
    local cur_j = max(0, cur - j * rate)
    local prev_j = min(rate, max(0, cur - (j - 1) * rate))
    at = start + j * interval
    if prev_j > 0 then
      at = at + interval * max(0, 1 - (rate - n - cur_j) / prev_j)
    end
  end
  -- Never 0 for a denial, whatever the rounding.
  return max(1, at - now)
end

local function try(n, _)
  if estimate() + n <= rate + EPS then
    cur = cur + n
    return 1, available(), 0, until_reset()
  end
  return 0, available(), until_fits(n), until_reset()
end

-- Grants as many of k requests of n permits as fit now, at once: the
-- same as calling try(n, 0) until one is denied (see fixed_window.lua).
local function take(m) cur = cur + m end
local function try_run(n, k)
  return run_of(min(k, floor((rate + EPS - estimate()) / n)), n, take, available, until_reset)
end

local reset_us = until_reset

local function charge(n)
  cur = max(cur, min(cur + n, rate * MAX_DEBT_US / interval))
  return rate - estimate(), until_reset()
end

-- Gives permits back: from this window's count first, then from the
-- previous window's (scaled, so the estimate falls by what is left).
local function give(n)
  local back = min(cur, n)
  cur, n = cur - back, n - back
  if n > 0 and prev > 0 then
    prev = max(0, prev - n / weight())
  end
end

local function save()
  local ttl = until_reset()
  if ttl <= 0 then
    drop(KEYS[2])
  else
    keep(KEYS[2], state3(start, prev, cur), ttl, stored)
  end
end
