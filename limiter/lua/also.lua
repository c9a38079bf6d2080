-- also.lua: RL.ACQUIRE key [permits] [ALSO key [permits]]...: several
-- names decided together, all or nothing, on one node in one call. Built
-- after make_store(KEYS, ARGV, algo), a function per algorithm, each
-- prelude.lua + the algorithm + multi.lua + also_name.lua (see also.go),
-- so names of any algorithms, explicit or governed by a policy, mix in
-- one call. Names of one algorithm whose state is stored alike share one
-- make_store run (also_name.lua: a store), so the set-up runs once for
-- them. One call may carry the groups of several
-- coalesced RL.ACQUIREs: a name in several groups is loaded once and
-- decided group after group, in order.
--
-- KEYS     every name's keys, name after name (its config key, then its
--          state keys: one cluster slot for all)
-- ARGV[1]  'acquire' | 'undo'
-- ARGV[2]  N, the number of names; then per name: its algorithm, its
--          config argument (prelude.lua's ARGV[2]), its number of keys
-- acquire: then the number of groups; per group its number of members,
--          then per member: name index (1..N), permits, max_wait_ms,
--          shadow (1: a SHADOW name, whose denial does not deny the group)
-- undo:    then per name: the permits to give back and the µs (this
--          node's clock) they were granted at, as an acquire answered
-- Reply: per name {status, epoch, now_us} (status as prelude.lua's:
--        0 ok, 1 no limiter, 2 another epoch), then for acquire per group:
--        1 granted, 0 denied or -2 undecided (a name's status is not 0),
--        then (unless undecided) per member 4 integers: granted alone (1,
--        0, -1 over capacity), remaining after the group, retry_after_us,
--        reset_after_us. A denied group keeps nothing: the members that
--        granted give their permits back in this call (exactly: same clock).
local floor, ceil, match, byte = math.floor, math.ceil, string.match, string.byte
local EPS = 1e-6
local function us(x)
  if x <= 0 then return 0 end
  return ceil(x - 1000 * EPS)
end

-- Each name is made by the store of its algorithm and state storage
-- (also_name.lua): the state storage is a policy's hashes when its config
-- argument starts '#hash_prefix gen_ms' (prelude.lua), else keys of
-- their own. limits[i] is name i's limit when it can be decided (status
-- 0), store[i] its store. Few tables: what a call allocates, Redis's Lua
-- collects, which costs about as much as the allocation.
local op, n = ARGV[1], tonumber(ARGV[2])
local limits, store, stores, made, out, a, k = {}, {}, {}, {}, {}, 3, 0
for i = 1, n do
  local algo, arg, nk = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local keys = {unpack(KEYS, k + 1, k + nk)}
  k = k + nk
  local at = algo
  if byte(arg, 1) == 35 then at = algo .. match(arg, '^#%S+ %d+') end -- '#'
  local s, r = made[at], nil
  if s then
    r = s.name(keys, arg)
  else
    r = make_store(keys, {op, arg}, algo)
    if not r then
      return redis.error_reply('ERR internal: no multi-name script for algorithm ' .. algo)
    end
    if r.name then
      s = r
      made[at] = s
      stores[#stores + 1] = s
      r = s.name(keys, arg, true)
    end
  end
  if r.err then return r end
  local o = #out
  if r[1] == 0 then
    limits[i], store[i] = r, s
    out[o + 1], out[o + 2], out[o + 3] = 0, r[2], s.now
    local st = s.state
    if st then
      for j = 2, nk do st[#st + 1] = keys[j] end
    end
  else
    out[o + 1], out[o + 2], out[o + 3] = r[1], r[2], 0
  end
end
-- A store of hashes reads its states at once (prelude.lua's prefetch).
for _, s in ipairs(stores) do
  if s.state and #s.state > 0 then s.prefetch(s.state) end
end
for i = 1, n do
  if limits[i] then limits[i][3].load() end
end

if op == 'undo' then
  for i = 1, n do
    if limits[i] then store[i].undo(limits[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1])) end
    a = a + 2
  end
else
  local groups = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, groups do
    local m, first = tonumber(ARGV[a]), a + 1 -- a member j's fields: ARGV[first + 4 * (j - 1) ...]
    a = first + 4 * m
    local decidable = true
    for j = first, a - 1, 4 do
      if not limits[tonumber(ARGV[j])] then decidable = false end
    end
    local o = #out
    if not decidable then
      out[o + 1] = -2
    else
      -- Each member decided as alone, its answer (granted, remaining,
      -- retry_us, reset_us) straight into out: no table per member.
      local all = true
      for j = first, a - 1, 4 do
        local l, p = limits[tonumber(ARGV[j])][3], tonumber(ARGV[j + 1])
        local g, rem, retry, reset = -1, 0, 0, 0
        if p <= l.capacity then
          g, rem, retry, reset = l.try(p, tonumber(ARGV[j + 2]) * 1000)
        else
          rem = l.available()
        end
        if g ~= 1 and ARGV[j + 3] ~= '1' then all = false end
        local x = o + 1 + (j - first)
        out[x + 1], out[x + 2], out[x + 3], out[x + 4] = g, rem, us(retry), us(reset)
      end
      out[o + 1] = all and 1 or 0
      for j = first, a - 1, 4 do
        local l, x = limits[tonumber(ARGV[j])][3], o + 1 + (j - first)
        if not all then
          if out[x + 1] == 1 then l.give(tonumber(ARGV[j + 1])) end
          out[x + 2] = l.available()
        end
        out[x + 2] = floor(out[x + 2] + EPS)
      end
    end
  end
end

for i = 1, n do
  if limits[i] then limits[i][3].save() end
end
for _, s in ipairs(stores) do s.flush() end
return out
