-- policy.lua: create, replace or delete one policy (RL.POLICY SET / DEL).
--
-- KEYS[1]  the policies hash: pattern -> "epoch\nshape\nspec"
-- KEYS[2]  the policies' version, raised by every change (proxies poll it)
-- ARGV[1]  'set' | 'del'
-- ARGV[2]  the pattern
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
if ARGV[1] == 'del' then
  local n = redis.call('HDEL', KEYS[1], ARGV[2])
  if n == 1 then redis.call('INCR', KEYS[2]) end
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
redis.call('INCR', KEYS[2])
return 1
