-- del.lua: delete keys of one sub-limiter (RL.DEL) and announce it.
--
-- KEYS     the keys to delete (one hash tag: one cluster slot)
-- ARGV[1]  the change feed's channel ('' = do not announce)
-- ARGV[2]  the announcement ('c <shards> <name>')
-- Reply: how many keys existed
local n = redis.call('DEL', unpack(KEYS))
if ARGV[1] ~= '' then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return n
