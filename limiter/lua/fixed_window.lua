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
--
-- Written as functions of one limit's state S, as token_bucket.lua.
local function new(rate, interval, _, keys)
  -- start, count: the state; stored: the state as read, when it is this
  -- window's ("start:count", or packed)
  return {capacity = rate, rate = rate, interval = interval, keys = keys, start = 0, count = 0}
end

local function load(S)
  local interval, rate = S.interval, S.rate
  local start, count, stored = fixed_start(now, interval), 0, nil
  local v = get(S.keys[2])
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
  S.start, S.count, S.stored = start, count, stored
end

-- True when now lies in the state's window (not before it).
local function current(S)
  return S.start <= now
end

local function available(S)
  if not current(S) then return 0 end
  return max(0, S.rate - S.count)
end

-- Windows from the state's until the count (with n more) fits in one.
local function windows_until(S, n)
  local rate = S.rate
  return max(0, ceil((S.count + n - rate) / rate - EPS))
end

-- Microseconds until every window is empty again.
local function until_reset(S)
  if S.count > 0 then return fixed_after(S.start, max(1, windows_until(S, 0) + 1), S.interval) - now end
  return S.start - now -- until the stored window starts (a clock stepped back)
end

local function try(S, n, _)
  if current(S) and S.count + n <= S.rate + EPS then
    S.count = S.count + n
    return 1, available(S), 0, until_reset(S)
  end
  -- The first window this request fits in: the stored window when it is
  -- still ahead and has room, else the first after it that the debt (if
  -- any) leaves room in. n <= rate, so an empty window always has room.
  local at = fixed_after(S.start, max(current(S) and 1 or 0, windows_until(S, n)), S.interval)
  return 0, available(S), at - now, until_reset(S)
end

local function charge(S, n)
  S.count = max(S.count, min(S.count + n, S.rate * MAX_DEBT_US / S.interval))
  return S.rate - S.count, until_reset(S)
end

local function give(S, n)
  S.count = max(0, S.count - n)
end

local function save(S)
  keep(S.keys[2], state2(S.start, S.count), until_reset(S), S.stored)
end


local reset_us = until_reset
