-- also_name.lua: the end of one store of also.lua. Built after
-- prelude.lua, an algorithm file wrapped as new_limit (scripts.go's
-- wrapLimit) and multi.lua, all inside the function of its algorithm
-- that make_store(KEYS, ARGV, algo) picks (see also.go): it makes a store. also.lua
-- makes one store per algorithm and state storage among a call's names
-- (keys of their own, or one policy's hashes), so the set-up that does
-- not depend on a name (the clock, the prelude's and the algorithm's
-- functions, the state storage and its flush) runs once for them, and
-- each name costs only its config read and its limit.
--
-- KEYS, ARGV are the store's first name's (its keys; op, its config
-- argument). Returns the store: {name, undo, flush, now[, prefetch, state]},
-- or prelude.lua's {status, epoch} when the first name cannot be decided
-- with the caller's config (no limiter, another epoch).

-- name(keys, arg, first) returns the name of config argument arg and
-- keys keys: {0, epoch, limit, keys, specs or false, rate, interval,
-- burst}, or {status, epoch} as prelude.lua (first: the store's first
-- name, whose config the prelude has read).
local function name(keys, arg, first)
  local c, r, i, b = conf, rate, interval, burst
  if not first then
    c, r, i, b = read_conf(keys[1], arg)
    if not c then return r end -- read_conf's reply
  end
  if c[6] then
    local specs = specs_of(c, r, i, b)
    local l = new_multi(keys, specs)
    if not l then
      return {2, c[1]} -- the caller named another number of limits
    end
    return {0, c[1], l, keys, specs}
  end
  return {0, c[1], new_limit(r, i, b, keys), keys, false, r, i, b}
end

-- undo(nm, n, t0) gives back n permits that an earlier call granted name
-- nm at t0 (this node's clock, µs) and that must not be kept (another
-- node denied). Never more than the grant still holds: what a bucket
-- drained since is gone with or without the grant, a window that has
-- ended keeps its count, and a log gives back only when its newest entry
-- is the grant's. Giving back more would let others take permits the rate
-- never made; giving back less only under-admits, and only within the
-- rollback.
local function undo(nm, n, t0)
  local keys, specs = nm[4], nm[5] or {{nm[6], nm[7], nm[8]}}
  local back = n
  local per = (#keys - 1) / #specs
  for i, s in ipairs(specs) do
    if algo == 'token-bucket' or algo == 'leaky-bucket' then
      back = min(back, n - (now - t0) * s[1] / s[2])
    elseif algo == 'sliding-log' then
      local newest = redis.call('ZRANGE', keys[2 + (i - 1) * per], -1, -1)
      if not newest[1] or tonumber(match(newest[1], '^(%d+):')) ~= t0 then
        back = 0
      end
    elseif algo == 'fixed-window' and fixed_start(t0, s[2]) ~= fixed_start(now, s[2]) then
      back = 0
    elseif window_of(t0, s[2]) ~= window_of(now, s[2]) then
      back = 0
    end
  end
  if back > EPS then
    nm[3].give(back)
  end
end

-- A store whose states are in a policy's hashes reads them all at once
-- (prefetch: a read per name costs one to three commands there); state
-- collects their keys. Keys of their own are read one GET each (an MGET
-- would save little and allocate more).
if gens then
  return {name = name, undo = undo, flush = flush, now = now, prefetch = prefetch, state = {}}
end
return {name = name, undo = undo, flush = flush, now = now}
