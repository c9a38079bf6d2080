-- fixed_window.lua: `rate` permits per window. Windows are aligned to
-- natural boundaries counted from the Unix epoch (midnight UTC): a window
-- starts at floor(now / interval) * interval, so a 1m window starts on the
-- minute, 1h on the hour and 1d at 00:00 UTC; an interval of limiter.Month
-- is a calendar month in UTC (calendar.lua). O(1) state.
--
-- KEYS[2]  state: "start:count" — permits counted in the window that
--          starts at `start` (microseconds since the epoch).
--
-- No reservations: wait_us is ignored, and a denied request comes back at
-- the window's end. (Booking into the next window would make RL.RELEASE
-- ambiguous: permits given back could belong to this window or the next,
-- and crediting the wrong one admits more than the rate.)
--
-- A count above rate is debt (RL.CHARGE): each window that starts pays
-- `rate` of it back, so a later window opens with what is left.
--
-- The clock may step back (after a failover) to before the stored window:
-- that window is kept, and the time before it counts as full, so a window
-- already used is never opened again.
local capacity = rate
local start, count
local stored -- the state as read, when it is this window's: "start:count" (or packed)

local function load()
  start, count, stored = fixed_start(now, interval), 0, nil
  local v = get(KEYS[2])
  if v then
    local s, c = read2(v)
    if s and c then
      -- Aligning again keeps a state written under another interval usable
      -- (KEEPSTATE carries its count over to the new interval).
      s = fixed_start(s, interval)
      if s >= start then
        start, count = s, c
        stored = v
      elseif c > rate then
        -- Debt left over from an earlier window: rate paid per window since.
        count = max(0, c - fixed_between(s, start, interval) * rate)
      end
    end
  end
end

-- True when now lies in the state's window (not before it).
local function current()
  return start <= now
end

local function available()
  if not current() then return 0 end
  return max(0, rate - count)
end

-- Windows from the state's until the count (with n more) fits in one.
local function windows_until(n)
  return max(0, ceil((count + n - rate) / rate - EPS))
end

-- Microseconds until every window is empty again.
local function until_reset()
  if count > 0 then return fixed_after(start, max(1, windows_until(0) + 1), interval) - now end
  return start - now -- until the stored window starts (a clock stepped back)
end

local function try(n, _)
  if current() and count + n <= rate + EPS then
    count = count + n
    return 1, available(), 0, until_reset()
  end
  -- The first window this request fits in: the stored window when it is
  -- still ahead and has room, else the first after it that the debt (if
  -- any) leaves room in. n <= rate, so an empty window always has room.
  local at = fixed_after(start, max(current() and 1 or 0, windows_until(n)), interval)
  return 0, available(), at - now, until_reset()
end

-- Grants as many of k requests of n permits as fit in this window, at
-- once: the same as calling try(n, 0) until one is denied, without a
-- loop over a hot limiter's coalesced requests (a run of 46 cost Redis
-- twice a run of 1).
local function take(m) count = count + m end
local function try_run(n, k)
  if not current() then
    return 0, 0, 0, 0
  end
  return run_of(min(k, floor((rate + EPS - count) / n)), n, take, available, until_reset)
end

local function charge(n)
  count = max(count, min(count + n, rate * MAX_DEBT_US / interval))
  return rate - count, until_reset()
end

local reset_us = until_reset

local function give(n)
  count = max(0, count - n)
end

local function save()
  keep(KEYS[2], state2(start, count), until_reset(), stored)
end
