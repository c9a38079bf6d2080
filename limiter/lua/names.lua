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
--           (permits, max_wait_ms = 0, count)
-- Reply: {0, epoch, per name: 0 and 8 integers per run as prelude.lua
--        describes, or 2 when the name has a config of its own (an
--        explicit limiter wins: the caller decides it alone)}
local per = tonumber(ARGV[3])
local out = {0, conf[1]}

local function us(x)
  if x <= 0 then return 0 end
  return math.ceil(x - 1000 * EPS)
end

local a, base = 4, 0
while a <= #ARGV do
  local runs = tonumber(ARGV[a])
  a = a + 1
  local keys = {}
  for j = 1, per do keys[j] = KEYS[base + j] end
  base = base + per
  if base > per and redis.call('EXISTS', keys[1]) == 1 then
    out[#out + 1] = 2
    a = a + 3 * runs
  else
    out[#out + 1] = 0
    local l = new_limit(rate, interval, burst, keys)
    l.load()
    for _ = 1, runs do
      local n, count = tonumber(ARGV[a]), tonumber(ARGV[a + 2])
      a = a + 3
      if n > l.capacity then
        out[#out + 1] = -1
        out[#out + 1] = math.floor(l.available() + EPS)
        for _ = 1, 6 do out[#out + 1] = 0 end
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
        for _, v in ipairs({g, math.floor(first_rem + EPS), us(first_retry), us(first_reset), us(last_reset),
            math.floor(deny_rem + EPS), us(deny_retry), us(deny_reset)}) do
          out[#out + 1] = v
        end
      end
    end
    l.save()
  end
end
return out
