-- setconf.lua: create or replace the config of one sub-limiter.
--
-- KEYS[1]  config hash of the sub-limiter
-- ARGV[1]  '1' = NX: never change an existing config
-- ARGV[2]  '1' = KEEPSTATE: keep the epoch (and so the state) when only the
--          rate, interval, burst, TTL, shadow or limits change
-- ARGV[3]  epoch for a new config (a fresh epoch means fresh, empty state)
-- ARGV[4]  ttl_ms of the limiter (0 = no TTL)
-- ARGV[5..] field, value, ... of the config (everything but epoch)
-- Reply: {changed (1|0), epoch in force, shard count before (0 = none)}
local cur = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  cur[flat[i]] = flat[i + 1]
end
local function refresh(ttl)
  if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
end

-- Optional fields are written only when set (limiter.Config.fields): one
-- stored but not given is a change too.
local optional = {'shadow', 'limits', 'sub_limits'}

if cur.epoch then
  local same = true
  local given = {}
  for i = 5, #ARGV, 2 do
    if cur[ARGV[i]] ~= ARGV[i + 1] then same = false end
    given[ARGV[i]] = true
  end
  for _, f in ipairs(optional) do
    if cur[f] and not given[f] then same = false end
  end
  if ARGV[1] == '1' or same then
    -- The config in force keeps its own TTL (NX may ask for another one).
    refresh(tonumber(cur.ttl_ms) or 0)
    return {0, cur.epoch, tonumber(cur.shards)}
  end
end

local epoch = ARGV[3]
local new = {}
for i = 5, #ARGV, 2 do new[ARGV[i]] = ARGV[i + 1] end
-- State survives only when its shape does: same algorithm, mode and shards.
-- (the number of limits is part of the shape: it names the state keys).
local function nlimits(v)
  local n = 1
  for _ in string.gmatch(v or '', ',?[^,]+') do n = n + 1 end
  return n
end
if ARGV[2] == '1' and cur.epoch and cur.algo == new.algo and cur.mode == new.mode
    and cur.shards == new.shards and nlimits(cur.limits) == nlimits(new.limits) then
  epoch = cur.epoch
end

redis.call('DEL', KEYS[1])
local args = {'epoch', epoch}
for i = 5, #ARGV do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(args))
refresh(tonumber(ARGV[4]))
return {1, epoch, tonumber(cur.shards or 0)}
