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
local conf
if string.sub(ARGV[2], 1, 1) == '=' then
  -- A name a policy governs (RL.POLICY): its config comes with the call,
  -- "=epoch sub_rate interval_ms sub_burst [sub_limits]", and it has no
  -- config key. One that appeared (RL.SETRATE: an explicit limiter wins
  -- over any policy) makes the caller read the config again.
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {2, ''}
  end
  local e, r, i, b, l = string.match(ARGV[2], '^=(%S+) (%d+) (%d+) (%d+) ?(%S*)$')
  if not e then
    return redis.error_reply('ERR internal: malformed policy config')
  end
  conf = {e, r, i, b, '0', l ~= '' and l or false}
else
  conf = redis.call('HMGET', KEYS[1], 'epoch', 'sub_rate', 'interval_ms', 'sub_burst', 'ttl_ms', 'sub_limits')
  if not conf[1] then
    return {1, ''}
  end
  if ARGV[2] ~= '' and ARGV[2] ~= conf[1] then
    return {2, conf[1]}
  end
end
local rate = tonumber(conf[2])
local interval = tonumber(conf[3]) * 1000 -- microseconds
local burst = tonumber(conf[4])
local ttl = tonumber(conf[5])
-- Use keeps the limiter alive for ttl more; only ever extend the expiry
-- (a proxy keeping a sharded limiter alive may have set it further out).
if ttl > 0 and redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
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
  return math.ceil(x - 1000 * EPS)
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
    return -1, math.floor(available() + EPS), 0, 0, 0, 0, 0, 0
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
  return g, math.floor(first_rem + EPS), us(first_retry), us(first_reset), us(last_reset),
    math.floor(deny_rem + EPS), us(deny_retry), us(deny_reset)
end

-- Debt (RL.CHARGE past zero) is kept only up to what is paid back within
-- this many microseconds (twice limiter.MaxRefill: 200 years), so every
-- duration stays a whole number Redis takes in SET PX and in a reply.
local MAX_DEBT_US = 2 * 36500 * 86400 * 1e6

-- Durations are computed in microseconds and reported in whole
-- milliseconds, rounded up: waiting retry_after_ms is always enough.
local function ms(us)
  if us <= 0 then return 0 end
  return math.ceil(us / 1000 - EPS)
end

-- Whether key's TTL still runs until us microseconds from now, as the
-- write that stored it set it (to the millisecond): a call that changed
-- nothing need not write its state again. PTTL counts from Redis's own
-- millisecond clock, hence the rounding.
local function lasts(key, us)
  return redis.call('PTTL', key) >= math.ceil((now + us) / 1000 - EPS) - math.floor(now / 1000) - 1
end

-- Sets key to value with a TTL of us microseconds (at least 1 ms), or
-- deletes it when nothing needs remembering. stored (optional) is the
-- value as read: when the call changed nothing (a denial, a peek) and the
-- TTL still runs, nothing is written — a write with a TTL is most of such
-- a call's cost in Redis.
local function keep(key, value, us, stored)
  if us <= 0 then
    redis.call('DEL', key)
  elseif value ~= stored or not lasts(key, us) then
    redis.call('SET', key, value, 'PX', math.max(1, ms(us)))
  end
end

-- String state is read through get(): names.lua fetches every name's
-- state keys with one MGET first (a redis.call costs about as much as
-- the rest of a name's decision) and leaves the values in prefetched,
-- each used once; other scripts leave it nil and read with GET.
local prefetched
local function get(key)
  if prefetched then
    local v = prefetched[key]
    if v ~= nil then
      prefetched[key] = nil
      return v
    end
  end
  return redis.call('GET', key)
end

-- Reads a "level:ts" state (permits held at time ts, in microseconds) and
-- drains it at one permit per per_permit microseconds up to now. The
-- clock may step back after a failover; time never runs backwards here.
local function drained(key, per_permit)
  local level, ts = 0, now
  local v = get(key)
  if v then
    local l, t = string.match(v, '^([^:]+):(.+)$')
    level, ts = tonumber(l) or 0, tonumber(t) or now
  end
  if now > ts then
    level = math.max(0, level - (now - ts) / per_permit)
    ts = now
  end
  return level, ts
end

-- An algorithm may define try_run (see epilogue.lua); this declaration
-- keeps the name defined for those that do not.
local try_run

-- Floats are stored with 17 significant digits so they read back exactly.
local function num(x)
  return string.format('%.17g', x)
end

-- Writes back a "level:ts" state read by drained() (loaded is the level
-- it returned), as keep() does: a level the call did not change is not
-- formatted and written again (it drains to the same level).
local function keep_drained(key, level, loaded, ts, per_permit)
  local us = level * per_permit
  if level <= EPS then
    redis.call('DEL', key)
  elseif level ~= loaded or not lasts(key, us) then
    keep(key, num(level) .. ':' .. num(ts), us)
  end
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
  local function load()
    local level
    level, ts = drained(keys[2], per_permit)
    loaded = level
    return level
  end
  local function save(level)
    keep_drained(keys[2], level, loaded, ts, per_permit)
  end
  return load, save
end
