-- multi.lua: the limits of one limiter, decided together (RL.SETRATE key
-- rate interval [LIMIT rate interval]...). Built after an algorithm file
-- wrapped as new_limit(rate, interval, burst, KEYS) (see scripts.go), so
-- each limit is one instance of the algorithm with its own state keys.
-- new_multi(keys) makes the one limiter they make: for the script's own
-- KEYS (then epilogue.lua decides with it; see scripts.go), or for each
-- name of a names call (names.lua).
--
-- keys[2..]  the state keys of the first limit, then those of each extra
--            limit in order, the same number for each
-- conf[6]    sub_limits: "sub_rate:interval_ms,..." of the extra limits
--            (this sub-limiter's share of each), or nil
--
-- A request is granted only when every limit grants it, and then takes
-- its permits from each (a limit that granted while another denied is
-- given them back: all or nothing). remaining is the least over the
-- limits, retry_after the latest (when every limit would have room; for a
-- reservation, when the last booking holds), reset_after the latest.
-- specs_of returns the limits {rate, interval, burst} of a config c
-- whose first limit is rate, interval, burst.
local function specs_of(c, rate, interval, burst)
  local specs = {{rate, interval, burst}}
  for r, iv in string.gmatch(c[6] or '', '(%d+):(%d+)') do
    specs[#specs + 1] = {tonumber(r), tonumber(iv) * 1000, tonumber(r)}
  end
  return specs
end
-- The script's config's limits, made at the first new_multi without
-- its own (also.lua's stores never need them: each name has its own).
local specs

-- new_multi returns the limiter of the limits whose keys are keys (specs:
-- the script's config's, unless given: also.lua's names have their
-- own), or nil when keys name the keys of another number of limits (the
-- caller's config is out of date: status 2 makes it read the config again).
local function new_multi(keys, specs_)
  if not specs_ and not specs then specs = specs_of(conf, rate, interval, burst) end
  local specs = specs_ or specs
  local per = (#keys - 1) / #specs
  if per < 1 or per ~= floor(per) then
    return nil
  end
  local limits = {}
  for i, s in ipairs(specs) do
    local lk = {keys[1]}
    for j = 1, per do lk[j + 1] = keys[1 + (i - 1) * per + j] end
    limits[i] = new_limit(s[1], s[2], s[3], lk)
  end
  local m = {capacity = math.huge}
  for _, l in ipairs(limits) do m.capacity = min(m.capacity, l.capacity) end
  if #limits == 1 then m.try_run = limits[1].try_run end

  function m.load()
    for _, l in ipairs(limits) do l.load() end
  end

  function m.save()
    for _, l in ipairs(limits) do l.save() end
  end

  function m.available()
    local a = math.huge
    for _, l in ipairs(limits) do a = min(a, l.available()) end
    return a
  end

  function m.give(n)
    for _, l in ipairs(limits) do l.give(n) end
  end

  function m.try(n, wait_us)
    if #limits == 1 then return limits[1].try(n, wait_us) end
    local all, retry = true, 0
    local granted = {}
    for i, l in ipairs(limits) do
      local g, _, r = l.try(n, wait_us)
      granted[i] = g == 1
      all = all and granted[i]
      retry = max(retry, r)
    end
    if not all then
      for i, l in ipairs(limits) do
        if granted[i] then l.give(n) end
      end
    end
    local reset = 0
    for _, l in ipairs(limits) do reset = max(reset, l.reset_us()) end
    return all and 1 or 0, m.available(), retry, reset
  end

  function m.charge(n)
    local remaining, reset = math.huge, 0
    for _, l in ipairs(limits) do
      local rem, r = l.charge(n)
      remaining, reset = min(remaining, rem), max(reset, r)
    end
    return remaining, reset
  end

  return m
end
