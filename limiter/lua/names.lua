-- names.lua: acquires for many names a policy governs, on one node, in one
-- call (each name one sub-limiter). Built after prelude.lua
-- (ARGV[2] is the policy's config, so rate, interval and burst are the
-- policy's), an algorithm file wrapped as new_limit(rate, interval,
-- burst, KEYS), and for a policy of several limits multi.lua's new_multi
-- (nil otherwise; see scripts.go).
--
-- KEYS     per name, ARGV[3] keys: its config key, then its state keys;
--          on a Redis Cluster the first name's only (below)
-- ARGV[1]  'names' (prelude.lua then leaves every config key to this file)
-- ARGV[3]  keys per name
-- ARGV[4]  how many of the names' keys follow in ARGV, not KEYS (a
--          Redis Cluster: 0 on a standalone node), then those keys
-- ARGV[..] per name: its number of runs, then each run as in prelude.lua
--           (permits, max_wait_ms, count); or, for a name asked once
--           without waiting (the usual case), minus the permits asked, alone
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

-- On a Redis Cluster a script may declare the keys of one slot only, and
-- each name has a slot of its own (its hash tag): the other names' keys
-- come in ARGV, and the script runs with allow-cross-slot-keys (scripts.go).
local K, a = KEYS, 5
local argv_keys = tonumber(ARGV[4])
if argv_keys > 0 then
  K = {}
  for k = 1, #KEYS do K[k] = KEYS[k] end
  for k = 5, 4 + argv_keys do K[#K + 1] = ARGV[k] end
  a = 5 + argv_keys
end
local nk = #K

-- alone(base): whether the name whose keys end at K[base] is left to
-- the caller (2); asked only when explicit (some name may be).
local alone, explicit
if argv_keys > 0 then
  -- A cluster: a command may touch one slot, so each name is read alone.
  -- A name whose slot this node does not serve now (the caller's slot map
  -- is old, or the slot is moving: Redis refuses the read) is left to the
  -- caller, as is one with a config of its own; all found here, before
  -- anything is written.
  local left = {}
  prefetched = {}
  for base = 0, nk - per, per do
    local e = redis.pcall('EXISTS', K[base + 1])
    local vals = e == 0 and redis.pcall('MGET', unpack(K, base + 2, base + per))
    if e ~= 0 or vals.err then
      left[base + per] = true
    else
      for j = 2, per do prefetched[K[base + j]] = vals[j - 1] end
    end
  end
  alone = function(base) return left[base] end
  explicit = next(left) ~= nil
else
  -- The names' config keys, with one EXISTS: when none has a config of
  -- its own (the usual case) no name needs its own EXISTS. Checked here,
  -- at decision time, so
  -- that an explicit limiter wins at once on every proxy; a set of
  -- explicit names would cost a SISMEMBER per name and upkeep on every
  -- RL.SETRATE, RL.DEL and config expiry, and a proxy's own cache cannot
  -- see another proxy's RL.SETRATE. Then every state with one read
  -- (prefetch), for get().
  local conf_keys, state_keys, c, s = {}, {}, 0, 0
  for base = 0, nk - per, per do
    c = c + 1
    conf_keys[c] = K[base + 1]
    for j = 2, per do
      s = s + 1
      state_keys[s] = K[base + j]
    end
  end
  explicit = redis.call('EXISTS', unpack(conf_keys)) > 0
  if s > 0 then prefetch(state_keys) end
  alone = function(base)
    return redis.call('EXISTS', K[base - per + 1]) == 1
  end
end

-- One limit for every name: its functions read their keys (keys) at
-- each load and save, and load sets all of its state, so building a
-- limit (a dozen closures) per name, most of a name's cost, is not needed.
-- A policy of several limits builds each name's (new_multi).
local keys = {}
for j = 1, per do keys[j] = K[j] end
local l
if new_multi then
  l = new_multi(keys)
  if not l then
    return {2, conf[1]} -- the caller named another number of limits
  end
else
  l = new_limit(rate, interval, burst, keys)
end

-- A token bucket's permit refills in per_permit µs (bucket_names: see
-- the inline decision below; scripts.go sets it).
local per_permit = interval / rate
local inline = bucket_names and packed

-- The limit's functions as locals: a field lookup per use is a
-- measurable part of a name's decision.
local load, try, save, available, capacity = l.load, l.try, l.save, l.available, l.capacity
local o, base = #out, 0
while a <= #ARGV do
  local runs = tonumber(ARGV[a]) -- below 0: asked once, minus the permits
  a = a + 1
  if new_multi and base > 0 then
    keys = {}
    for j = 1, per do keys[j] = K[base + j] end
    l = new_multi(keys)
    load, try, save, available, capacity = l.load, l.try, l.save, l.available, l.capacity
  elseif not (inline and runs < 0) then
    for j = 1, per do keys[j] = K[base + j] end
  end
  base = base + per
  if explicit and alone(base) then
    o = o + 1
    out[o] = runs < 0 and -2 or 2
    if runs > 0 then a = a + 3 * runs end
  elseif runs < 0 then
    local n = -runs
    local granted, remaining, retry, reset -- as replied: whole, µs
    if inline then
      -- A token bucket's name, its state in a hash (the usual case):
      -- load, try and save inline, as token_bucket.lua does them; a
      -- dozen function calls a name were most of its decision.
      local key = K[base - per + 2]
      local v = prefetched[key]
      prefetched[key] = nil
      local level, ts = 0, now
      if v and #v == 16 then level, ts = sunpack('<dd', v) end
      if now > ts then
        level = level - (now - ts) / per_permit
        if level < 0 then level = 0 end
        ts = now
      end
      local loaded, over = level, (level + n - burst) * per_permit
      granted, retry, reset = -1, 0, 0
      if n <= burst then
        granted = 0
        if level + n <= burst + EPS then
          granted, level = 1, level + n
        end
        retry, reset = us(over), us(level * per_permit)
      end
      remaining = floor(max(0, burst - level) + EPS)
      local life = level * per_permit
      if level <= EPS then
        drop(key)
      elseif level ~= loaded or not lasts(key, life) then
        -- keep()'s usual case inline: into a generation alive, the
        -- state not elsewhere.
        local value, i = spack('<dd', level, ts), ceil(ceil((now + life) / 1000 - EPS) / gen_ms) - gen
        local w, l = where[key], sets[i]
        if l and (w == nil or w == gen + i) then
          l[#l + 1], l[#l + 2], where[key] = key, value, gen + i
        else
          keep(key, value, life)
        end
      end
    else
      load()
      if n <= capacity then
        granted, remaining, retry, reset = try(n, 0)
      else
        granted, remaining, retry, reset = -1, available(), 0, 0
      end
      save()
      remaining, retry, reset = floor(remaining + EPS), us(retry), us(reset)
    end
    -- A plain grant (most names): its remaining and reset alone.
    if granted == 1 and retry == 0 and remaining >= 0 then
      out[o + 1], out[o + 2] = remaining, reset
      o = o + 2
    else
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = -1, granted, remaining, retry, reset
      o = o + 5
    end
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
end
flush()
return out
