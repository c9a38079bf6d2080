-- epilogue.lua: shared tail of every limiter script. The algorithm file
-- before it defines:
--   capacity          most permits one request may ask for
--   load()            read state (and age it to now)
--   try(n, wait_us)   decide one request that may wait up to wait_us:
--                     granted, remaining, retry_us, reset_us (a grant with
--                     retry_us > 0 is a reservation; algorithms that
--                     cannot book ahead ignore wait_us)
--   available()       permits that could be granted now
--   give(n)           take n permits back (never above capacity)
--   save()            write state back with a TTL (or delete it when full)
load()
local out = {0, conf[1]}
local op = ARGV[1]
if op == 'acquire' then
  for i = 3, #ARGV, 2 do
    local n, wait_us = tonumber(ARGV[i]), tonumber(ARGV[i + 1]) * 1000
    if n > capacity then
      out[#out + 1] = -1
      out[#out + 1] = math.floor(available() + EPS)
      out[#out + 1] = 0
      out[#out + 1] = 0
    else
      local granted, remaining, retry_us, reset_us = try(n, wait_us)
      out[#out + 1] = granted
      out[#out + 1] = math.floor(remaining + EPS)
      out[#out + 1] = ms(retry_us)
      out[#out + 1] = ms(reset_us)
    end
  end
elseif op == 'release' then
  give(tonumber(ARGV[3]))
  out[#out + 1] = math.floor(available() + EPS)
else
  out[#out + 1] = math.floor(available() + EPS)
end
save()
return out
