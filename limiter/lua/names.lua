-- names.lua: acquires for many names a policy governs, on one node, in one
-- call (each name one sub-limiter). Built after prelude.lua
-- (ARGV[2] is the policy's config, so rate, interval and burst are the
-- policy's), an algorithm file wrapped as new_limit(rate, interval,
-- burst, KEYS), and for a policy of several limits multi.lua's new_multi
-- (nil otherwise; see scripts.go).
--
-- KEYS     every name's config key, then every name's state keys (ARGV[3]
--          keys per name in all); on a Redis Cluster the first name's
--          only, its config key then its state keys (below)
-- ARGV[1]  'names' (prelude.lua then leaves every config key to this file)
-- ARGV[3]  keys per name
-- ARGV[4]  how many of the names' keys follow in ARGV, not KEYS (a
--          Redis Cluster: 0 on a standalone node), then those keys, each
--          name's as the first name's in KEYS
-- ARGV[..] per name: its number of runs, then each run as in prelude.lua
--           (permits, max_wait_ms, count); or, for a name asked once
--           without waiting (the usual case), minus the permits asked, alone;
--           or, when every name is asked once for as many permits (most
--           calls), only '*' and those permits negated ('*-1')
-- Reply: {0, epoch, per name: a name asked once (most names, so the
--        narrowest reply): a plain grant (granted, no wait) as its
--        remaining and reset_after_us (remaining >= 0), any other answer
--        as -1 then granted, remaining, retry_after_us, reset_after_us;
--        -2 alone when it is left to the caller. Other names: 0 then 8
--        integers per run as prelude.lua describes, or 2 alone when left
--        to the caller. A name is left to the caller when it has a config
--        of its own (an explicit limiter wins: the caller decides it
--        alone) or, on a cluster, its slot is not this node's}
local per = tonumber(ARGV[3])
local out = {0, conf[1]}

-- The names' keys as one list, K: every name's config key (name c's is
-- K[c]), then every name's state keys (name c's from K[N + (c-1)*(per-1) + 1]),
-- so that one EXISTS and one HMGET take slices of it. On a standalone
-- node that is KEYS as sent. On a Redis Cluster a script may declare the
-- keys of one slot only, and each name has a slot of its own (its hash
-- tag): KEYS are the first name's keys, the other names' come in ARGV (in
-- the order of a name's keys), and the script runs with
-- allow-cross-slot-keys (scripts.go).
local K, a = KEYS, 5
local argv_keys = tonumber(ARGV[4])
if argv_keys > 0 then
  K = {}
  local c, s, n = 0, 0, (#KEYS + argv_keys) / per
  local function add(from, first, last)
    for k = first, last, per do
      c = c + 1
      K[c] = from[k]
      for j = 1, per - 1 do
        s = s + 1
        K[n + s] = from[k + j]
      end
    end
  end
  add(KEYS, 1, #KEYS)
  add(ARGV, 5, 4 + argv_keys)
  a = 5 + argv_keys
end
local N = #K / per
local sk = per - 1 -- state keys per name

-- The state keys of name c as keys (keys[1] its config key).
local keys = {}
local function keys_of(c)
  keys[1] = K[c]
  local s = N + (c - 1) * sk
  for j = 1, sk do keys[j + 1] = K[s + j] end
end

-- A token bucket's or a fixed window's names asked once (the usual case)
-- are decided inline, their states read and written by position, not
-- through get() and keep(): a dozen function calls and table lookups by
-- key a name were most of its decision. A calendar month's window keeps
-- the general path (fixed_window.lua).
local inline = (bucket_names or window_names and interval ~= MONTH_US) and packed
local first -- HMGET of the first generation alive: MARK's, then each name's state
local vals, at -- of the names missed there, by number: the state and where it is (1 or 'long')

-- alone(c): whether name c is left to the caller (2); asked only when
-- explicit (some name may be).
local alone, explicit
if argv_keys > 0 then
  -- A cluster: a command may touch one slot, so each name is read alone.
  -- A name whose slot this node does not serve now (the caller's slot map
  -- is old, or the slot is moving: Redis refuses the read) is left to the
  -- caller, as is one with a config of its own; all found here, before
  -- anything is written.
  local left = {}
  prefetched = {}
  for c = 1, N do
    local e = redis.pcall('EXISTS', K[c])
    local s = N + (c - 1) * sk
    local v = e == 0 and redis.pcall('MGET', unpack(K, s + 1, s + sk))
    if e ~= 0 or v.err then
      left[c] = true
    else
      for j = 1, sk do prefetched[K[s + j]] = v[j] end
    end
  end
  alone = function(c) return left[c] end
  explicit = next(left) ~= nil
else
  -- The names' config keys, with one EXISTS: when none has a config of
  -- its own (the usual case) no name needs its own EXISTS. Checked here,
  -- at decision time, so that an explicit limiter wins at once on every
  -- proxy; a set of explicit names would cost a SISMEMBER per name and
  -- upkeep on every RL.SETRATE, RL.DEL and config expiry, and a proxy's
  -- own cache cannot see another proxy's RL.SETRATE.
  explicit = redis.call('EXISTS', unpack(K, 1, N)) > 0
  alone = function(c)
    return redis.call('EXISTS', K[c]) == 1
  end
  if inline then
    -- Every state with one HMGET of the first generation alive (and the
    -- upkeep's MARK: see prelude.lua), the misses from the second, then
    -- from keys of their own while there are any.
    vals, at = {}, {}
    first = redis.call('HMGET', gens[0], MARK, unpack(K, N + 1, N + N))
    marked = first[1] ~= false
    local missed, m = {}, 0
    for c = 1, N do
      if not first[c + 1] then
        m = m + 1
        missed[m] = c
      end
    end
    if m > 0 then
      -- The misses (names by number) from the second generation, then
      -- from keys of their own.
      local function look(place, cmd, h)
        local ks, left, l = {}, {}, 0
        for j = 1, m do ks[j] = K[N + missed[j]] end
        local got = h and redis.call(cmd, h, unpack(ks)) or redis.call(cmd, unpack(ks))
        for j = 1, m do
          local c = missed[j]
          if got[j] then
            vals[c], at[c] = got[j], place
          else
            l = l + 1
            left[l] = c
          end
        end
        missed, m = left, l
      end
      look(1, 'HMGET', gens[1])
      if m > 0 and redis.call('EXISTS', long_flag) == 1 then look('long', 'MGET') end
    end
  else
    prefetch({unpack(K, N + 1)})
  end
end

-- One limit for every name: its functions read their keys (keys) at
-- each load and save, and load sets all of its state, so building a
-- limit (a dozen closures) per name, most of a name's cost, is not
-- needed; built at the first name that needs it. A policy of several
-- limits builds each name's (new_multi), the first one now: a config of
-- another number of limits is found before anything is written.
local l, load, try, save, available, capacity
local function limit_of(c)
  keys_of(c)
  if new_multi then
    keys = {unpack(keys)}
    l = new_multi(keys)
  elseif not l then
    l = new_limit(rate, interval, burst, keys)
  end
  if l then
    load, try, save, available, capacity = l.load, l.try, l.save, l.available, l.capacity
  end
  return l
end
if new_multi and not limit_of(1) then
  return {2, conf[1]} -- the caller named another number of limits
end

-- A token bucket's permit refills in per_permit µs.
local per_permit = interval / rate
-- The pending HSETs of the generations alive (flush() writes them), and
-- how many values each holds.
local set0, set1, n0, n1
-- A state that must last until y ms goes in the first generation ending
-- at or after it (prelude.lua): the first alive when y <= end0, else
-- the second when y <= end1.
local end0, end1
if inline then
  set0, set1, n0, n1 = sets[0] or {}, sets[1] or {}, 0, 0
  sets[0], sets[1] = set0, set1
  end0, end1 = gen * gen_ms, (gen + 1) * gen_ms
end

-- A fixed window's µs until every window is empty again
-- (fixed_window.lua's until_reset): the window's end unless the count is
-- past the rate (debt).
local fmod = math.fmod
local function window_reset(start, count)
  if count <= 0 then return start - now end
  if count <= rate then return start + interval - now end
  return start + max(1, max(0, ceil((count - rate) / rate - EPS)) + 1) * interval - now
end
-- The window now holds (every name's, so reckoned once a call).
local window_now = now - fmod(now, interval)

-- Writes name key's state value (read as was: 0, 1, 'long' or nil) for
-- life µs, as keep() does: dropped when it need not last (value nil),
-- not written when unchanged and already where it goes.
local function place(key, value, life, changed, was)
  if not value then
    if was then pend(dels, was, key) end
    return
  end
  -- The generation the state goes in: the first ending at or after
  -- its end (prelude.lua).
  local y = (now + life) / 1000 - EPS
  local i = y <= end0 and 0 or y <= end1 and 1 or 2
  if not changed and i == was then return end
  if i == 0 then
    set0[n0 + 1], set0[n0 + 2] = key, value
    n0 = n0 + 2
  elseif i == 1 then
    set1[n1 + 1], set1[n1 + 2] = key, value
    n1 = n1 + 2
  else
    if was then where[key] = gen + was end
    keep(key, value, life)
  end
  if was ~= i and was and i < 2 then pend(dels, was, key) end
end

-- Every name asked once for as many permits comes as one ARGV ('*-1'):
-- a string per name costs Redis about as much as a tenth of its
-- decision. Otherwise most names still ask as many (the same string,
-- which Lua compares as one pointer): tonumber is called once per
-- different one.
local every = string.byte(ARGV[a]) == 42 and tonumber(string.sub(ARGV[a], 2))
local arg, arg_n
local argv = ARGV -- a local: a global's lookup per name counts
local o = #out
-- answer: a name asked once; a plain grant (most names) as its remaining
-- and reset alone, the narrowest reply.
local function answer(granted, remaining, retry, reset)
  if granted == 1 and retry == 0 and remaining >= 0 then
    out[o + 1], out[o + 2] = remaining, reset
    o = o + 2
  else
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = -1, granted, remaining, retry, reset
    o = o + 5
  end
end
for c = 1, N do
  local runs = every -- below 0: asked once, minus the permits
  if not runs then
    runs = argv[a]
    if runs ~= arg then
      arg, arg_n = runs, tonumber(runs)
    end
    runs = arg_n
    a = a + 1
  end
  local v, was -- its state as read and where: 0, 1 or 'long' (inline)
  if inline then
    v, was = first[c + 1], 0
    if not v then v, was = vals[c], at[c] end
  end
  if explicit and alone(c) then
    o = o + 1
    out[o] = runs < 0 and -2 or 2
    if runs > 0 then a = a + 3 * runs end
  elseif inline and runs < 0 and was ~= 'long' then
    local n, key = -runs, K[N + c]
    -- As replied (whole, µs), and the state to write: value for life µs,
    -- changed or not.
    local granted, retry, reset, remaining, value, life, changed = -1, 0, 0
    if bucket_names then
      -- load, try and save as token_bucket.lua does them.
      local level, ts = 0, now
      if v and #v == 16 then level, ts = sunpack('<dd', v) end
      if now > ts then
        level = level - (now - ts) / per_permit
        if level < 0 then level = 0 end
        ts = now
      end
      local loaded, over = level, (level + n - burst) * per_permit
      if n <= burst then
        granted = 0
        if level + n <= burst + EPS then
          granted, level = 1, level + n
        end
        if over > 0 then retry = us(over) end
      end
      life = level * per_permit
      if n <= burst and life > 0 then reset = ceil(life - 1000 * EPS) end -- us(life), a call less
      local left = burst - level
      if left < 0 then left = 0 end
      remaining = floor(left + EPS)
      value, changed = level > EPS and spack('<dd', level, ts) or nil, level ~= loaded
    else
      -- load, try and save as fixed_window.lua does them.
      local start, count, stored = window_now, 0, nil
      if v and #v == 16 then
        local s, k = sunpack('<dd', v)
        -- A state of this window (most) is aligned already; one written
        -- under another interval (KEEPSTATE) is aligned again.
        if s ~= start then s = s - fmod(s, interval) end
        if s >= start then
          start, count, stored = s, k, v
        elseif k > rate then
          count = max(0, k - floor((start - s) / interval + 0.5) * rate)
        end
      end
      local cur = start <= now
      if n <= rate then
        if cur and count + n <= rate + EPS then
          count, granted = count + n, 1
        else
          local at = start + max(cur and 1 or 0, max(0, ceil((count + n - rate) / rate - EPS))) * interval
          granted, retry = 0, us(at - now)
        end
      end
      local left = cur and rate - count or 0
      remaining = left > 0 and floor(left + EPS) or 0
      -- Windows start on whole µs, so the reset is whole: us() would
      -- only clamp it at 0.
      life = window_reset(start, count)
      if n <= rate and life > 0 then reset = life end
      value = spack('<dd', start, count)
      changed = value ~= stored
      if life <= 0 then value = nil end
    end
    if value and was == 0 and (now + life) / 1000 - EPS <= end0 then
      -- The usual: the state stays in the first generation, where it was
      -- read (place() does the rest).
      if changed then
        set0[n0 + 1], set0[n0 + 2] = key, value
        n0 = n0 + 2
      end
    else
      place(key, value, life, changed, was)
    end
    if granted == 1 and retry == 0 then
      -- A plain grant, as answer() writes it: inline, a call less a name.
      out[o + 1], out[o + 2] = remaining, reset
      o = o + 2
    else
      answer(granted, remaining, retry, reset)
    end
  else
    limit_of(c)
    if inline then
      -- What the inline path read serves get() too.
      local key = keys[2]
      prefetched = prefetched or {}
      prefetched[key] = v or nil
      if v then where[key] = was == 'long' and 'long' or gen + was end
    end
    if runs < 0 then
      local n = -runs
      local granted, remaining, retry, reset
      load()
      if n <= capacity then
        granted, remaining, retry, reset = try(n, 0)
      else
        granted, remaining, retry, reset = -1, available(), 0, 0
      end
      save()
      answer(granted, floor(remaining + EPS), us(retry), us(reset))
    else
      o = o + 1
      out[o] = 0
      load()
      for _ = 1, runs do
        local n, wait_us, count = tonumber(ARGV[a]), tonumber(ARGV[a + 1]) * 1000, tonumber(ARGV[a + 2])
        a = a + 3
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
          decide_run(try, l.try_run, capacity, available, n, wait_us, count)
        o = o + 8
      end
      save()
    end
    if set0 then n0, n1 = #set0, #set1 end -- keep() may have added to them
  end
end
if set0 then
  if n0 == 0 then sets[0] = nil end
  if n1 == 0 then sets[1] = nil end
end
flush()
return out
