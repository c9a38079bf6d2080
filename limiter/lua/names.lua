-- names.lua: acquires for many names a policy governs, on one node, in one
-- call (each name one sub-limiter). Built after prelude.lua
-- (ARGV[2] is the policy's config, so rate, interval and burst are the
-- policy's), an algorithm file wrapped as new_limit(rate, interval,
-- burst, KEYS), and for a policy of several limits multi.lua's new_multi
-- (nil otherwise; see scripts.go).
--
-- KEYS     per name, ARGV[3] keys: its config key, then its state keys;
--          on a Redis Cluster the first name's only (below)
-- ARGV[1]  'acquire'
-- ARGV[3]  keys per name
-- ARGV[4]  how many of the names' keys follow in ARGV, not KEYS (a
--          Redis Cluster: 0 on a standalone node), then those keys
-- ARGV[..] per name: its number of runs, then each run as in prelude.lua
--           (permits, max_wait_ms, count); or, for a name asked once
--           without waiting (the usual case), minus the permits asked, alone
-- Reply: {0, epoch, per name: 0 and 8 integers per run as prelude.lua
--        describes (asked once: 4, granted, remaining, retry_after_us,
--        reset_after_us, of the grant or the denial), or 2 when the name
--        has a config of its own (an explicit limiter wins: the caller
--        decides it alone) or, on a cluster, its slot is not this node's}
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
-- the caller (2).
local alone
if argv_keys > 0 then
  -- A cluster: a command may touch one slot, so each name is read alone.
  -- A name whose slot this node does not serve now (the caller's slot map
  -- is old, or the slot is moving: Redis refuses the read) is left to the
  -- caller, as is one with a config of its own; all found here, before
  -- anything is written.
  local left = {}
  prefetched = {}
  for base = 0, nk - per, per do
    local e = base == 0 and 0 or redis.pcall('EXISTS', K[base + 1])
    local vals = e == 0 and redis.pcall('MGET', unpack(K, base + 2, base + per))
    if e ~= 0 or vals.err then
      left[base + per] = true
    else
      for j = 2, per do prefetched[K[base + j]] = vals[j - 1] end
    end
  end
  alone = function(base) return left[base] end
else
  -- The other names' config keys, with one EXISTS: when none has a
  -- config of its own (the usual case) no name needs its own EXISTS.
  -- (prelude.lua checked the first.) Checked here, at decision time, so
  -- that an explicit limiter wins at once on every proxy; a set of
  -- explicit names would cost a SISMEMBER per name and upkeep on every
  -- RL.SETRATE, RL.DEL and config expiry, and a proxy's own cache cannot
  -- see another proxy's RL.SETRATE. Then every state with one read
  -- (prefetch), for get().
  local explicit = false
  if nk > per then
    local conf_keys = {}
    for k = per + 1, nk, per do conf_keys[#conf_keys + 1] = K[k] end
    explicit = redis.call('EXISTS', unpack(conf_keys)) > 0
  end
  if per > 1 then
    local state_keys = {}
    for k = 1, nk do
      if k % per ~= 1 then state_keys[#state_keys + 1] = K[k] end
    end
    prefetch(state_keys)
  end
  alone = function(base)
    return explicit and base > per and redis.call('EXISTS', K[base - per + 1]) == 1
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

local base = 0
while a <= #ARGV do
  local runs = tonumber(ARGV[a])
  a = a + 1
  local single = runs < 0
  if single then runs = 1 end
  if new_multi and base > 0 then
    keys = {}
    for j = 1, per do keys[j] = K[base + j] end
    l = new_multi(keys)
  else
    for j = 1, per do keys[j] = K[base + j] end
  end
  base = base + per
  if alone(base) then
    out[#out + 1] = 2
    if not single then a = a + 3 * runs end
  else
    out[#out + 1] = 0
    l.load()
    for _ = 1, runs do
      local n, wait_us, count = 0, 0, 1
      if single then
        n = -tonumber(ARGV[a - 1])
      else
        n, wait_us, count = tonumber(ARGV[a]), tonumber(ARGV[a + 1]) * 1000, tonumber(ARGV[a + 2])
        a = a + 3
      end
      local o = #out
      if single then
        local granted, remaining, retry_us, reset_us
        if n <= l.capacity then
          granted, remaining, retry_us, reset_us = l.try(n, 0)
        else
          granted, remaining, retry_us, reset_us = -1, l.available(), 0, 0
        end
        out[o + 1] = granted
        out[o + 2] = floor(remaining + EPS)
        out[o + 3] = us(retry_us)
        out[o + 4] = us(reset_us)
      else
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
          decide_run(l.try, l.try_run, l.capacity, l.available, n, wait_us, count)
      end
    end
    l.save()
  end
end
flush()
return out
