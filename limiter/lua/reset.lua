-- reset.lua: give a sub-limiter fresh, full state by moving it to a new
-- epoch (its old state keys are no longer read and expire by their TTLs).
--
-- KEYS[1]  config hash of the sub-limiter
-- ARGV[1]  the new epoch
-- Reply: the old epoch, or false when there is no such limiter
local old = redis.call('HGET', KEYS[1], 'epoch')
if old then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1])
end
return old
