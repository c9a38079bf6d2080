-- calendar.lua: calendar months in UTC for the fixed window (prepended
-- to prelude.lua). A fixed window whose interval is exactly MONTH_US (the
-- mean Gregorian month, limiter.Month) is a calendar month: it starts on
-- the 1st at 00:00 UTC, so its length is 28 to 31 days. Times are
-- microseconds since the Unix epoch; the date math is Howard Hinnant's
-- days_from_civil / civil_from_days, in whole numbers (exact in doubles).
local MONTH_US = 2629746 * 1000000
local DAY_US = 86400 * 1000000

-- The month holding t: its number counted from year 0 (year * 12 + month - 1).
local function month_index(t)
  local z = math.floor(t / DAY_US) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return y * 12 + m - 1
end

-- The start (µs) of the month numbered i (see month_index).
local function month_start(i)
  local y, m = math.floor(i / 12), i % 12 + 1
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return (era * 146097 + doe - 719468) * DAY_US
end

-- The start of the fixed window of length span that holds t: a calendar
-- month for MONTH_US, else aligned to the epoch.
local function fixed_start(t, span)
  if span == MONTH_US then return month_start(month_index(t)) end
  return t - math.fmod(t, span)
end

-- The start of the k-th window after the one starting at start.
local function fixed_after(start, k, span)
  if span == MONTH_US then return month_start(month_index(start) + k) end
  return start + k * span
end

-- How many windows from the one starting at a to the one starting at b.
local function fixed_between(a, b, span)
  if span == MONTH_US then return month_index(b) - month_index(a) end
  return math.floor((b - a) / span + 0.5)
end
