-- reset.lua: give a sub-limiter fresh, full state by moving it to a new
-- epoch (its old state keys are no longer read and expire by their TTLs).
--
-- KEYS[1]  config hash of the sub-limiter
-- ARGV[1]  the new epoch
-- ARGV[2]  the change feed's channel ('' or none: do not announce)
-- ARGV[3]  the announcement ('c <shards> <name>')
-- Reply: the old epoch, or false when there is no such limiter
local old = redis.call('HGET', KEYS[1], 'epoch')
if old then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1])
end
if ARGV[2] and ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return old
