-- policy.lua: create, replace or delete one policy (RL.POLICY SET / DEL).
--
-- KEYS[1]  the policies hash: pattern -> "epoch\nshape\nspec"
-- KEYS[2]  the policies' version, raised by every change (proxies read
--          it when told of a change, and now and then in case they missed one)
-- ARGV[1]  'set' | 'del'
-- ARGV[2]  the pattern
-- ARGV[#ARGV]  the change feed's channel: a change is announced there ('p')
-- set:
-- ARGV[3]  spec: the policy's config, written the same way for the same config
-- ARGV[4]  shape: what its names' state keys depend on (algorithm, mode,
--          shards, number of limits); KEEPSTATE keeps the epoch only
--          when it is unchanged
-- ARGV[5]  epoch for a new or changed policy (fresh state for its names)
-- ARGV[6]  '1' = NX: never change an existing policy
-- ARGV[7]  '1' = KEEPSTATE
-- ARGV[8]  the most policies there may be
-- Reply: 1 created or changed, 0 left as it was (or not there to delete),
--        -1 too many policies.

-- Raises the version. A store that has none (new, or it lost its data:
-- a restart without persistence, a flush) starts it at the server's time
-- in microseconds, not at 1: a proxy that read a version of the lost
-- store must not take the new store's for the one it has, and keep its
-- old policies. Still an integer, so INCR (of older proxies too) works.
local function bump()
  if redis.call('EXISTS', KEYS[2]) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
  end
  redis.call('INCR', KEYS[2])
  redis.call('PUBLISH', ARGV[#ARGV], 'p')
end

if ARGV[1] == 'del' then
  local n = redis.call('HDEL', KEYS[1], ARGV[2])
  if n == 1 then bump() end
  return n
end
local cur = redis.call('HGET', KEYS[1], ARGV[2])
local epoch = ARGV[5]
if cur then
  if ARGV[6] == '1' then return 0 end
  local e, shape, spec = string.match(cur, '^([^\n]*)\n([^\n]*)\n(.*)$')
  if spec == ARGV[3] then return 0 end
  if ARGV[7] == '1' and shape == ARGV[4] then epoch = e end
elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[8]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[2], epoch .. '\n' .. ARGV[4] .. '\n' .. ARGV[3])
bump()
return 1
