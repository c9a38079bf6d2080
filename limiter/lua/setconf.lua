-- setconf.lua: create or replace the config of one sub-limiter.
--
-- KEYS[1]  config hash of the sub-limiter
-- ARGV[1]  who writes: '0' shard 0 (the limiter's config: it decides the
--          generation), '1' shard 0 with NX: never change an existing
--          config, 'F' a follower shard: written only when the given gen
--          (the 'gen' field of ARGV[5..]) is newer than the stored one
--          (compare-and-set), 'R' a follower replaced whatever it holds
--          (repair), 'D' a follower deleted when its gen is older than the
--          given one
-- ARGV[2]  '1' = KEEPSTATE: keep the epoch (and so the state) when only the
--          rate, interval, burst, TTL, shadow or limits change
-- ARGV[3]  epoch for a new config (a fresh epoch means fresh, empty state)
-- ARGV[4]  ttl_ms of the limiter (0 = no TTL)
-- ARGV[5]  the change feed's channel ('' = do not announce: followers)
-- ARGV[6]  the limiter's name, for the announcement
-- ARGV[7..] field, value, ... of the config (everything but epoch; a
--          follower's also carries 'gen', shard 0's generation)
-- Reply: {changed (1|0; -1 = refused: KEEPSTATE on a concurrency limiter
--         whose shard count or mode would change), epoch in force, shard
--         count before (0 = none), gen in force ('0' = none)}
--
-- The generation: shard 0 stores gen = max(TIME in microseconds, old gen
-- + 1) whenever its config changes, so gens only grow. A follower takes
-- a config only with a higher gen than it holds: however writers from
-- many proxies interleave, every follower ends on shard 0's config.
--
-- A changed config is announced on the change feed (PUBLISH ARGV[5]
-- 'c <shards> <name>', shards the larger of the old and new counts), so
-- every proxy drops what it cached of the limiter and wakes its waiters.
local cur = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  cur[flat[i]] = flat[i + 1]
end
local function refresh(ttl)
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    redis.call('PERSIST', KEYS[1])
  end
end

-- replace makes fields (field, value, ...) the whole config: written
-- first, then the fields of the old one it does not have removed. Past
-- maxmemory Redis refuses a script's first write that may grow memory,
-- and nothing is changed then; a DEL first would let the HSET through.
local function replace(fields)
  redis.call('HSET', KEYS[1], unpack(fields))
  local kept, stale = {}, {}
  for i = 1, #fields, 2 do kept[fields[i]] = true end
  for f in pairs(cur) do
    if not kept[f] then stale[#stale + 1] = f end
  end
  if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
end

-- Optional fields are written only when set (limiter.Config.fields): one
-- stored but not given is a change too.
local optional = {'shadow', 'limits', 'sub_limits'}

local mode = ARGV[1]
if mode == 'F' or mode == 'R' or mode == 'D' then
  local gen = 0
  for i = 7, #ARGV, 2 do
    if ARGV[i] == 'gen' then gen = tonumber(ARGV[i + 1]) or 0 end
  end
  local have = tonumber(cur.gen or '0') or 0
  if mode ~= 'R' and cur.epoch and have >= gen then
    return {0, cur.epoch, tonumber(cur.shards) or 0, cur.gen or '0'}
  end
  if mode == 'D' then
    redis.call('DEL', KEYS[1])
    return {1, '', tonumber(cur.shards or 0) or 0, '0'}
  end
  local args = {'epoch', ARGV[3]}
  for i = 7, #ARGV do args[#args + 1] = ARGV[i] end
  replace(args)
  refresh(tonumber(ARGV[4]))
  return {1, ARGV[3], tonumber(cur.shards or 0) or 0, tostring(gen)}
end

-- Shard 0: the next generation, after every one it ever stored.
local function next_gen()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%d', math.max(us, (tonumber(cur.gen or '0') or 0) + 1))
end

if cur.epoch then
  local same = true
  local given = {}
  for i = 7, #ARGV, 2 do
    if cur[ARGV[i]] ~= ARGV[i + 1] then same = false end
    given[ARGV[i]] = true
  end
  for _, f in ipairs(optional) do
    if cur[f] and not given[f] then same = false end
  end
  if mode == '1' or same then
    -- The config in force keeps its own TTL (NX may ask for another one).
    refresh(tonumber(cur.ttl_ms) or 0)
    if not cur.gen then
      -- Written by an rlproxy without generations: give it one.
      cur.gen = next_gen()
      redis.call('HSET', KEYS[1], 'gen', cur.gen)
    end
    return {0, cur.epoch, tonumber(cur.shards), cur.gen}
  end
end

local epoch = ARGV[3]
local new = {}
for i = 7, #ARGV, 2 do new[ARGV[i]] = ARGV[i + 1] end
-- State survives only when its shape does: same algorithm, mode and shards.
-- (the number of limits is part of the shape: it names the state keys).
local function nlimits(v)
  local n = 1
  for _ in string.gmatch(v or '', ',?[^,]+') do n = n + 1 end
  return n
end
-- A semaphore's leases are held per sub-limiter (their ids name the
-- shard) and per client under PER_CLIENT: under another shard count or
-- mode they would be forgotten and the new config over-admit, so
-- KEEPSTATE is refused rather than dropping them quietly.
if ARGV[2] == '1' and cur.algo == 'concurrency' and new.algo == 'concurrency'
    and (cur.shards ~= new.shards or cur.mode ~= new.mode) then
  return {-1, cur.epoch, tonumber(cur.shards), cur.gen or '0'}
end
if ARGV[2] == '1' and cur.epoch and cur.algo == new.algo and cur.mode == new.mode
    and cur.shards == new.shards and nlimits(cur.limits) == nlimits(new.limits) then
  epoch = cur.epoch
end

local gen = next_gen()
local args = {'epoch', epoch, 'gen', gen}
for i = 7, #ARGV do args[#args + 1] = ARGV[i] end
replace(args)
refresh(tonumber(ARGV[4]))
if ARGV[5] ~= '' then
  local shards = math.max(tonumber(new.shards) or 1, tonumber(cur.shards) or 0)
  redis.call('PUBLISH', ARGV[5], 'c ' .. shards .. ' ' .. ARGV[6])
end
return {1, epoch, tonumber(cur.shards or 0), gen}
