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
if ARGV[1] == 'clear' then
  -- RL.RESET / RL.DEL of a name a policy governs: its state goes, wherever
  -- it is kept (prelude.lua's State storage). Reply {0, epoch, keys that
  -- had state}.
  local n = 0
  for k = 2, #KEYS do
    if get(KEYS[k]) then
      n = n + 1
      drop(KEYS[k])
    end
  end
  flush()
  return {0, conf[1], n}
end
load()
local out = {0, conf[1]}
local op = ARGV[1]

if op == 'acquire' then
  -- Runs of identical requests, each decided in order: once one is
  -- denied, the rest of its run would be denied the same way (a denial
  -- changes nothing), so a run's answer is how many were granted, the
  -- first and last grant, and the denial.
  for i = 3, #ARGV, 3 do
    local n, wait_us, count = tonumber(ARGV[i]), tonumber(ARGV[i + 1]) * 1000, tonumber(ARGV[i + 2])
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
      decide_run(try, try_run, capacity, available, n, wait_us, count)
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
flush()
return out
