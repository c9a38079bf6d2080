-- epilogue.lua: shared tail of every limiter script. The algorithm file
-- before it defines:
--   capacity          most permits one request may ask for
--   load()            read state (and age it to now)
--   try_run(n, count) optional: decide count requests of n permits that
--                     do not wait at once: granted, first grant's
--                     remaining and reset_us, last grant's reset_us
--   try(n, wait_us)   decide one request that may wait up to wait_us:
--                     granted, remaining, retry_us, reset_us (a grant with
--                     retry_us > 0 is a reservation; algorithms that
--                     cannot book ahead ignore wait_us)
--   available()       permits that could be granted now
--   give(n)           take n permits back (never above capacity)
--   charge(n)         take n permits whatever is available (debt past
--                     zero, up to MAX_DEBT_US): remaining (signed), reset_us
--   save()            write state back with a TTL (or delete it when full)
load()
local out = {0, conf[1]}
local op = ARGV[1]

-- Whole microseconds, rounded up (0 stays 0). The noise absorbed is ms()'s
-- (EPS ms), so rounding these µs up to ms gives what ms() gives: a day
-- computed as 86400000000.00002 µs is still 86400000 ms.
local function us(x)
  if x <= 0 then return 0 end
  return math.ceil(x - 1000 * EPS)
end

if op == 'acquire' then
  -- Runs of identical requests, each decided in order: once one is
  -- denied, the rest of its run would be denied the same way (a denial
  -- changes nothing), so a run's answer is how many were granted, the
  -- first and last grant, and the denial.
  for i = 3, #ARGV, 3 do
    local n, wait_us, count = tonumber(ARGV[i]), tonumber(ARGV[i + 1]) * 1000, tonumber(ARGV[i + 2])
    if n > capacity then
      out[#out + 1] = -1
      out[#out + 1] = math.floor(available() + EPS)
      for _ = 1, 6 do out[#out + 1] = 0 end
    else
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
      out[#out + 1] = g
      out[#out + 1] = math.floor(first_rem + EPS)
      out[#out + 1] = us(first_retry)
      out[#out + 1] = us(first_reset)
      out[#out + 1] = us(last_reset)
      out[#out + 1] = math.floor(deny_rem + EPS)
      out[#out + 1] = us(deny_retry)
      out[#out + 1] = us(deny_reset)
    end
  end
elseif op == 'charge' then
  local remaining, reset_us = charge(tonumber(ARGV[3]))
  local reset = us(reset_us)
  for _, v in ipairs({1, math.floor(remaining + EPS), 0, reset, reset, 0, 0, 0}) do
    out[#out + 1] = v
  end
elseif op == 'release' then
  give(tonumber(ARGV[3]))
  out[#out + 1] = math.floor(available() + EPS)
else
  out[#out + 1] = math.floor(available() + EPS)
end
save()
return out
