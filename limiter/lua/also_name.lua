-- also_name.lua: the end of one name's part of also.lua. Built after
-- prelude.lua, an algorithm file wrapped as new_limit (scripts.go's
-- wrapLimit) and multi.lua, all inside one function per algorithm,
-- function(KEYS, ARGV, algo), so that each name of a call has its own
-- config, state storage and clock reading (see also.go).
--
-- Returns {0, epoch, limit, flush, now, undo}, or prelude.lua's
-- {status, epoch} when the name cannot be decided with the caller's
-- config (no limiter, another epoch).
local l
if conf[6] then
  l = new_multi(KEYS)
  if not l then
    return {2, conf[1]} -- the caller named another number of limits
  end
else
  l = new_limit(rate, interval, burst, KEYS)
end

-- undo(n, t0) gives back n permits that an earlier call granted at t0
-- (this node's clock, µs) and that must not be kept (another node
-- denied). Never more than the grant still holds: what a bucket drained
-- since is gone with or without the grant, a window that has ended keeps
-- its count, and a log gives back only when its newest entry is the
-- grant's. Giving back more would let others take permits the rate never
-- made; giving back less only under-admits, and only within the rollback.
local function undo(n, t0)
  local back = n
  local per = (#KEYS - 1) / #specs
  for i, s in ipairs(specs) do
    if algo == 'token-bucket' or algo == 'leaky-bucket' then
      back = math.min(back, n - (now - t0) * s[1] / s[2])
    elseif algo == 'sliding-log' then
      local newest = redis.call('ZRANGE', KEYS[2 + (i - 1) * per], -1, -1)
      if not newest[1] or tonumber(string.match(newest[1], '^(%d+):')) ~= t0 then
        back = 0
      end
    elseif algo == 'fixed-window' and fixed_start(t0, s[2]) ~= fixed_start(now, s[2]) then
      back = 0
    elseif window_of(t0, s[2]) ~= window_of(now, s[2]) then
      back = 0
    end
  end
  if back > EPS then
    l.give(back)
  end
end

return {0, conf[1], l, flush, now, undo}
