-- prelude.lua: shared head of every limiter script (prepended when the script is built).
--
-- KEYS[1]   config hash of one sub-limiter (written by setconf.lua)
-- KEYS[2..] state keys of the algorithm (named by the algorithm's file)
-- ARGV[1]   op: 'acquire' | 'peek' | 'release' | 'charge'
-- ARGV[2]   epoch the caller expects ('' skips the check), or for a
--           name a policy governs '=' and the policy's config (below)
-- ARGV[3..] acquire: the coalesced requests, decided in order, as runs of
--             identical ones: permits, max_wait_ms (how long the caller
--             may wait; 0 = now), count
--           release: the permits given back
--           charge: the permits taken after the fact (even past zero)
-- Reply: {status, epoch, results...}
--   status 0: ok; 1: no such limiter (no config); 2: the epoch changed
--   (config or state was replaced: the caller refreshes and retries).
--   acquire results: 8 integers per run
--     {granted (how many of the run, from its start; -1 = more permits
--      than the capacity), first grant's remaining, retry_after_us,
--      reset_after_us, last grant's reset_after_us, and the denial of the
--      rest: remaining, retry_after_us, reset_after_us}
--     Durations are whole microseconds, rounded up. A grant with
--     retry_after > 0 is a reservation: the permits are booked now and
--     take effect after it (the caller holds the reply until then, or
--     releases them if it gives up).
--   charge results: one run's 8 integers, granted 1, remaining signed
--     (below zero: the debt that later acquires wait out)
--   peek / release results: {available}
-- Hot library functions, as locals: a global lookup costs as much as
-- the call in Redis's Lua.
local ceil, floor, max, min, fmt, match = math.ceil, math.floor, math.max, math.min, string.format, string.match

local names_call = ARGV[1] == 'names' -- names.lua's call (see there)
local hash_prefix, gen_ms -- set for a name whose state is kept in hashes (below)
local packed, spack, sunpack -- string states are packed doubles (below): struct's functions

-- read_conf reads the config of the sub-limiter whose config key is key,
-- for the caller's arg (ARGV[2]): conf and its rate, interval (µs) and
-- burst, or nil and the script's reply (no limiter, another epoch). A
-- function so that also.lua reads each of its names' with it.
local function read_conf(key, arg)
  local conf
  local kind = string.sub(arg, 1, 1)
  if kind == '=' or kind == '#' then
    -- A name a policy governs (RL.POLICY): its config comes with the call,
    -- "=epoch sub_rate interval_ms sub_burst [sub_limits]", and it has no
    -- config key. One that appeared (RL.SETRATE: an explicit limiter wins
    -- over any policy) makes the caller read the config again (names.lua
    -- checks all its names' at once: names_call). '#' is the same config
    -- with its policy's state hashes first: "#hash_prefix gen_ms epoch ..."
    -- (see State storage below).
    if not names_call and redis.call('EXISTS', key) == 1 then
      return nil, {2, ''}
    end
    local e, r, i, b, l
    if kind == '#' then
      hash_prefix, gen_ms, e, r, i, b, l = match(arg, '^#(%S+) (%d+) (%S+) (%d+) (%d+) (%d+) ?(%S*)$')
      gen_ms = tonumber(gen_ms)
      local struct = rawget(_G, 'struct')
      if struct then
        packed, spack, sunpack = true, struct.pack, struct.unpack
      end
    else
      e, r, i, b, l = match(arg, '^=(%S+) (%d+) (%d+) (%d+) ?(%S*)$')
    end
    if not e then
      return nil, redis.error_reply('ERR internal: malformed policy config')
    end
    conf = {e, r, i, b, '0', l ~= '' and l or false}
  else
    conf = redis.call('HMGET', key, 'epoch', 'sub_rate', 'interval_ms', 'sub_burst', 'ttl_ms', 'sub_limits')
    if not conf[1] then
      return nil, {1, ''}
    end
    if arg ~= '' and arg ~= conf[1] then
      return nil, {2, conf[1]}
    end
  end
  -- Use keeps the limiter alive for ttl more; only ever extend the expiry
  -- (a proxy keeping a sharded limiter alive may have set it further out).
  local ttl = tonumber(conf[5])
  if ttl > 0 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
  return conf, tonumber(conf[2]), tonumber(conf[3]) * 1000, tonumber(conf[4])
end

local conf, rate, interval, burst = read_conf(KEYS[1], ARGV[2]) -- interval: microseconds
if not conf then
  return rate -- read_conf's reply
end

-- Time comes from this Redis server, never from a proxy or a caller.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- EPS absorbs floating-point noise when comparing permit counts.
local EPS = 1e-6

-- Whole microseconds, rounded up (0 stays 0). The noise absorbed is ms()'s
-- (EPS ms), so rounding these µs up to ms gives what ms() gives: a day
-- computed as 86400000000.00002 µs is still 86400000 ms.
local function us(x)
  if x <= 0 then return 0 end
  return ceil(x - 1000 * EPS)
end

-- decide_run decides a run of count identical requests of n permits, each
-- in order (try and try_run are the algorithm's; try_run, when it has one,
-- grants a run at once): once one is denied the rest would be denied the
-- same way (a denial changes nothing). It returns the run's answer: how
-- many were granted, the first grant's remaining, retry and reset, the
-- last grant's reset, and the denial's remaining, retry and reset (µs);
-- -1 granted when n is more than capacity.
local function decide_run(try, try_run, capacity, available, n, wait_us, count)
  if n > capacity then
    return -1, floor(available() + EPS), 0, 0, 0, 0, 0, 0
  end
  local g, first_rem, first_retry, first_reset, last_reset = 0, 0, 0, 0, 0
  local granted, remaining, retry_us, reset_us
  if try_run and wait_us == 0 and count > 1 then
    g, first_rem, first_reset, last_reset = try_run(n, count)
  end
  while g < count do
    granted, remaining, retry_us, reset_us = try(n, wait_us)
    if granted ~= 1 then break end
    if g == 0 then
      first_rem, first_retry, first_reset = remaining, retry_us, reset_us
    end
    last_reset = reset_us
    g = g + 1
  end
  local deny_rem, deny_retry, deny_reset = 0, 0, 0
  if g < count then
    deny_rem, deny_retry, deny_reset = remaining, retry_us, reset_us
  end
  return g, floor(first_rem + EPS), us(first_retry), us(first_reset), us(last_reset),
    floor(deny_rem + EPS), us(deny_retry), us(deny_reset)
end

-- run_of is an algorithm's try_run once it knows that g of a run of
-- requests of n permits fit (g <= 0: none): add(m) counts m permits
-- taken. Its answer as try_run's: granted, the first grant's remaining
-- and reset, the last grant's reset.
local function run_of(g, n, add, available, reset)
  if g <= 0 then
    return 0, 0, 0, 0
  end
  add(n)
  local first_rem, first_reset = available(), reset()
  add((g - 1) * n)
  return g, first_rem, first_reset, reset()
end

-- Debt (RL.CHARGE past zero) is kept only up to what is paid back within
-- this many microseconds (twice limiter.MaxRefill: 200 years), so every
-- duration stays a whole number Redis takes in SET PX and in a reply.
local MAX_DEBT_US = 2 * 36500 * 86400 * 1e6

-- Durations are computed in microseconds and reported in whole
-- milliseconds, rounded up: waiting retry_after_ms is always enough.
local function ms(us)
  if us <= 0 then return 0 end
  return ceil(us / 1000 - EPS)
end

-- State storage. String state (every algorithm but sliding-log and
-- concurrency) is read with get(key) and written with keep(key, ...) or
-- dropped with drop(key); the script ends with flush().
--
-- Each state key is a key of its own with a TTL, except for a name a
-- policy governs on a standalone Redis (hash_prefix set): a key of its
-- own costs a name ~175 B and a SET PX of 2-3 µs, most of its decision.
-- There the state is a field (named by the key) of one of the policy's
-- generation hashes, "<hash_prefix>:<n>", which end at n * gen_ms
-- (Unix ms): a state that must last until t is in the hash of the first
-- generation ending at or after t. A generation that has ended is
-- UNLINKed by the next call that writes (Redis frees a big hash off its
-- main thread then; one that expires is freed on it unless
-- lazyfree-lazy-expire is on: 370 ms for a million names), and expires
-- one generation later, should no call come. gen_ms is at least the longest
-- a state of the policy lasts (without waiting or debt), so a state is
-- in one of the two generations alive now, and one HMGET and one HSET
-- per generation serve a whole call of many names. A state is at most in
-- one place: writing it elsewhere removes it from where it was. A state
-- that must outlive both (booked ahead, debt) is a key of its own, as
-- elsewhere, and the key "<hash_prefix>:long" lasts as long as the
-- longest of them: while it exists, misses are looked up as keys too.
-- gens, sets and dels are keyed by a generation's place among the two
-- alive (0, 1), not by its number: the embedded backend's Lua (miniredis,
-- gopher-lua) keeps a table's integer keys below 2^26 in an array, filled
-- with nils up to the key, and generation numbers are in the millions.
-- A hash's field MARK (no state key is empty) says that its expiry is set
-- and the generation before it UNLINKed: a call that read it (prefetch)
-- spares those two commands, which would cost a names call as much as a
-- dozen names' decisions.
local MARK = ''
local gen, gens, long_flag, where, sets, dels, marked -- gen: the first generation alive
if hash_prefix then
  gen = floor(now / 1000 / gen_ms) + 1
  gens = {[0] = hash_prefix .. ':' .. gen, [1] = hash_prefix .. ':' .. (gen + 1)}
  long_flag = hash_prefix .. ':long'
  where, sets, dels = {}, {}, {}
end

-- Whether key's TTL still runs until us microseconds from now, as the
-- write that stored it set it (to the millisecond): a call that changed
-- nothing need not write its state again. PTTL counts from Redis's own
-- millisecond clock, hence the rounding.
local function lasts(key, us)
  local until_ms = ceil((now + us) / 1000 - EPS)
  if gens and where[key] ~= 'long' then
    return where[key] == ceil(until_ms / gen_ms)
  end
  return redis.call('PTTL', key) >= until_ms - floor(now / 1000) - 1
end

-- Reads the state of keys into prefetched (names.lua: one read for the
-- whole call; a redis.call costs about as much as the rest of a name's
-- decision). get() then uses each value once.
local prefetched
local function prefetch(keys)
  prefetched = {}
  if not gens then
    local vals = redis.call('MGET', unpack(keys))
    for j = 1, #keys do prefetched[keys[j]] = vals[j] end
    return
  end
  -- Each place is asked only for the keys not found before.
  local function look(cmd, h, n)
    if #keys == 0 then return end
    local vals = h and redis.call(cmd, h, unpack(keys)) or redis.call(cmd, unpack(keys))
    local missed = {}
    for j = 1, #keys do
      local k = keys[j]
      if vals[j] then
        prefetched[k], where[k] = vals[j], n
      else
        missed[#missed + 1] = k
      end
    end
    keys = missed
  end
  keys[#keys + 1] = MARK
  look('HMGET', gens[0], gen)
  marked = prefetched[MARK] ~= nil
  if marked then
    prefetched[MARK], where[MARK] = nil, nil
  else
    keys[#keys] = nil -- the last missed
  end
  look('HMGET', gens[1], gen + 1)
  if #keys > 0 and redis.call('EXISTS', long_flag) == 1 then look('MGET', nil, 'long') end
end

local function get(key)
  if prefetched then
    local v = prefetched[key]
    if v ~= nil then
      prefetched[key] = nil
      return v
    end
    if gens then return nil end -- prefetched: not stored
  end
  if not gens then
    return redis.call('GET', key)
  end
  for i = 0, 1 do
    local v = redis.call('HGET', gens[i], key)
    if v then
      where[key] = gen + i
      return v
    end
  end
  if redis.call('EXISTS', long_flag) == 1 then
    local v = redis.call('GET', key)
    if v then where[key] = 'long' end
    return v
  end
end

-- Adds key (and value, for a set) to list[i]: the pending sets or
-- deletes of the generation at place i (0, 1).
local function pend(list, i, key, value)
  local l = list[i]
  if not l then
    l = {}
    list[i] = l
  end
  l[#l + 1] = key
  if value then l[#l + 1] = value end
end

-- Removes key's state from wherever it is.
local function drop(key)
  if not gens then
    redis.call('DEL', key)
    return
  end
  local w = where[key]
  if w == 'long' then
    redis.call('DEL', key)
  elseif w then
    pend(dels, w - gen, key)
  end
  where[key] = nil
end

-- Sets key's state to value for us microseconds (at least 1 ms), or
-- drops it when nothing needs remembering. stored (optional) is the
-- value as read: when the call changed nothing (a denial, a peek) and
-- the state still lasts, nothing is written — a write with a TTL is most
-- of such a call's cost in Redis.
local function keep(key, value, us, stored)
  if us <= 0 then
    drop(key)
    return
  elseif value == stored and lasts(key, us) then
    return
  end
  if gens then
    local n = ceil(ceil((now + us) / 1000 - EPS) / gen_ms)
    if gens[n - gen] then
      local w = where[key]
      if w and w ~= n then drop(key) end
      pend(sets, n - gen, key, value)
      where[key] = n
      return
    end
  end
  local px = max(1, ms(us))
  if not gens then
    redis.call('SET', key, value, 'PX', px)
    return
  end
  if where[key] ~= 'long' then drop(key) end
  redis.call('SET', key, value, 'PX', px)
  where[key] = 'long'
  if redis.call('PTTL', long_flag) < px then
    redis.call('SET', long_flag, '1', 'PX', px)
  end
end

-- Writes what keep() and drop() left pending: the end of every script.
-- The HSETs come first: past maxmemory Redis refuses a script's first
-- write that may grow memory, but not the writes after another one (an
-- UNLINK first would let a call write past maxmemory).
local function flush()
  if not gens then return end
  local first = sets[0]
  if first and not marked then
    first[#first + 1], first[#first + 2] = MARK, '1'
  end
  for i, l in pairs(sets) do
    redis.call('HSET', gens[i], unpack(l))
    if i == 1 or not marked then
      redis.call('PEXPIREAT', gens[i], (gen + i + 1) * gen_ms)
    end
  end
  if first and not marked then
    redis.call('UNLINK', hash_prefix .. ':' .. (gen - 1))
  end
  for i, l in pairs(dels) do
    redis.call('HDEL', gens[i], unpack(l))
  end
  sets, dels = {}, {}
end

-- An algorithm may define try_run (see epilogue.lua); this declaration
-- keeps the name defined for those that do not.
local try_run

-- Floats are stored with 17 significant digits so they read back exactly;
-- whole numbers Lua can hold exactly as integers (TIME's microseconds)
-- with %d, the same digits at a fraction of the cost.
local function whole(x)
  return x == floor(x) and x < 9e15 and x > -9e15
end

local function num(x)
  if whole(x) then
    return fmt('%d', x)
  end
  return fmt('%.17g', x)
end

-- A string state is two or three numbers. Written as decimals ("a:b",
-- "a:b:c") they cost a name's decision about 1.5 µs in Redis's Lua (a
-- match, a tonumber per number, a %.17g format): packed as doubles
-- (struct, exact) a fifth of that, in fewer bytes. A policy's names
-- kept in hashes are packed when its epoch says so ('p', made so since
-- this format came: a policy made before keeps decimals, which older
-- proxies read) and the server has struct (Redis has; the embedded
-- backend's Lua has not). read2/read3 return a state's numbers (nil for
-- one that does not hold them); state2/state3 make a state of numbers.
local function read2(v)
  if packed then
    if #v ~= 16 then return end
    local a, b = sunpack('<dd', v)
    return a, b
  end
  local a, b = match(v, '^([^:]+):(.+)$')
  return tonumber(a), tonumber(b)
end

local function read3(v)
  if packed then
    if #v ~= 24 then return end
    local a, b, c = sunpack('<ddd', v)
    return a, b, c
  end
  local a, b, c = match(v, '^([^:]+):([^:]+):(.+)$')
  return tonumber(a), tonumber(b), tonumber(c)
end

local function state2(a, b)
  if packed then
    return spack('<dd', a, b)
  elseif whole(b) then
    return fmt(whole(a) and '%d:%d' or '%.17g:%d', a, b) -- one format call for both
  end
  return num(a) .. ':' .. num(b)
end

local function state3(a, b, c)
  if packed then
    return spack('<ddd', a, b, c)
  end
  return num(a) .. ':' .. num(b) .. ':' .. num(c)
end

-- The window of length span that holds t, for the window algorithms
-- (fixed-window, sliding-window): windows are aligned to natural
-- boundaries counted from the Unix epoch (midnight UTC).
local function window_of(t, span)
  return t - math.fmod(t, span) -- fmod is exact on integers
end

-- The state of the bucket algorithms (token-bucket, leaky-bucket): a
-- "level:ts" string in keys[2], draining one permit per per_permit
-- microseconds; level is what the bucket holds (permits in use, or
-- queued). bucket returns its load() (the level now) and save(level).
-- The key is read at each load and save: names.lua reuses one limit for
-- every name of its call, changing keys in between.
local function bucket(keys, per_permit)
  local ts, loaded
  -- Reads the state (permits held at time ts, in microseconds) and drains
  -- it up to now. The clock may step back after a failover; time never
  -- runs backwards here.
  local function load()
    local level
    level, ts = 0, now
    local v = get(keys[2])
    if v then
      local l, t = read2(v)
      level, ts = l or 0, t or now
    end
    if now > ts then
      level = max(0, level - (now - ts) / per_permit)
      ts = now
    end
    loaded = level
    return level
  end
  -- Writes the state back, as keep() does: a level the call did not
  -- change is not formatted and written again (it drains to the same
  -- level).
  local function save(level)
    local key, us = keys[2], level * per_permit
    if level <= EPS then
      drop(key)
    elseif level ~= loaded or not lasts(key, us) then
      keep(key, state2(level, ts), us)
    end
  end
  return load, save
end
