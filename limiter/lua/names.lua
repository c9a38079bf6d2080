-- names.lua: acquires for many names a policy governs, on one node, in one
-- call (each name one sub-limiter of one limit, no waiting). Built after
-- prelude.lua (ARGV[2] is the policy's config, so rate, interval and
-- burst are the policy's) and an algorithm file wrapped as
-- new_limit(rate, interval, burst, KEYS) (see scripts.go).
--
-- KEYS     per name, ARGV[3] keys: its config key, then its state keys
-- ARGV[1]  'acquire'
-- ARGV[3]  keys per name
-- ARGV[4..] per name: its number of runs, then each run as in prelude.lua
--           (permits, max_wait_ms = 0, count); or, for a name asked once
--           (the usual case), minus the permits asked, alone
-- Reply: {0, epoch, per name: 0 and 8 integers per run as prelude.lua
--        describes (asked once: 4, granted, remaining, retry_after_us,
--        reset_after_us, of the grant or the denial), or 2 when the name
--        has a config of its own (an explicit limiter wins: the caller
--        decides it alone)}
local per = tonumber(ARGV[3])
local out = {0, conf[1]}
local nk = #KEYS

local function us(x)
  if x <= 0 then return 0 end
  return math.ceil(x - 1000 * EPS)
end

-- The other names' config keys, with one EXISTS: when none has a config
-- of its own (the usual case) no name needs its own EXISTS. (prelude.lua
-- checked the first.) Checked here, at decision time, so that an explicit
-- limiter wins at once on every proxy; a set of explicit names would cost
-- a SISMEMBER per name and upkeep on every RL.SETRATE, RL.DEL and config
-- expiry, and a proxy's own cache cannot see another proxy's RL.SETRATE.
-- Then every state key with one MGET, for get().
local explicit = false
if nk > per then
  local conf_keys = {}
  for k = per + 1, nk, per do conf_keys[#conf_keys + 1] = KEYS[k] end
  explicit = redis.call('EXISTS', unpack(conf_keys)) > 0
end
if per > 1 then
  local state_keys = {}
  for k = 1, nk do
    if k % per ~= 1 then state_keys[#state_keys + 1] = KEYS[k] end
  end
  local vals = redis.call('MGET', unpack(state_keys))
  prefetched = {}
  for j = 1, #state_keys do prefetched[state_keys[j]] = vals[j] end
end

-- One limit for every name: its functions read their keys (keys) at
-- each load and save, and load sets all of its state, so building a
-- limit (a dozen closures) per name, most of a name's cost, is not needed.
local keys = {}
for j = 1, per do keys[j] = KEYS[j] end
local l = new_limit(rate, interval, burst, keys)

local a, base = 4, 0
while a <= #ARGV do
  local runs = tonumber(ARGV[a])
  a = a + 1
  local single = runs < 0
  if single then runs = 1 end
  for j = 1, per do keys[j] = KEYS[base + j] end
  base = base + per
  if explicit and base > per and redis.call('EXISTS', keys[1]) == 1 then
    out[#out + 1] = 2
    if not single then a = a + 3 * runs end
  else
    out[#out + 1] = 0
    l.load()
    for _ = 1, runs do
      local n, count = 0, 1
      if single then
        n = -tonumber(ARGV[a - 1])
      else
        n, count = tonumber(ARGV[a]), tonumber(ARGV[a + 2])
        a = a + 3
      end
      local o = #out
      if single then
        local granted, remaining, retry_us, reset_us = -1, l.available(), 0, 0
        if n <= l.capacity then
          granted, remaining, retry_us, reset_us = l.try(n, 0)
        end
        out[o + 1] = granted
        out[o + 2] = math.floor(remaining + EPS)
        out[o + 3] = us(retry_us)
        out[o + 4] = us(reset_us)
      elseif n > l.capacity then
        out[o + 1] = -1
        out[o + 2] = math.floor(l.available() + EPS)
        for k = 3, 8 do out[o + k] = 0 end
      else
        local g, first_rem, first_retry, first_reset, last_reset = 0, 0, 0, 0, 0
        local granted, remaining, retry_us, reset_us
        if l.try_run and count > 1 then
          g, first_rem, first_reset, last_reset = l.try_run(n, count)
        end
        while g < count do
          granted, remaining, retry_us, reset_us = l.try(n, 0)
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
        out[o + 1] = g
        out[o + 2] = math.floor(first_rem + EPS)
        out[o + 3] = us(first_retry)
        out[o + 4] = us(first_reset)
        out[o + 5] = us(last_reset)
        out[o + 6] = math.floor(deny_rem + EPS)
        out[o + 7] = us(deny_retry)
        out[o + 8] = us(deny_reset)
      end
    end
    l.save()
  end
end
return out
