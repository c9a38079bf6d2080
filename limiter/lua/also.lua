-- also.lua: RL.ACQUIRE key [permits] [ALSO key [permits]]...: several
-- names decided together, all or nothing, on one node in one call. Built
-- after one function per algorithm, algos[algo](KEYS, ARGV, algo), each
-- prelude.lua + the algorithm + multi.lua + also_name.lua (see
-- scripts.go), so names of any algorithms, explicit or governed by a
-- policy, mix in one call. One call may carry the groups of several
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
local floor, ceil = math.floor, math.ceil
local EPS = 1e-6
local function us(x)
  if x <= 0 then return 0 end
  return ceil(x - 1000 * EPS)
end

local op, n = ARGV[1], tonumber(ARGV[2])
local names, out, a, k = {}, {}, 3, 0
for i = 1, n do
  local algo, conf, nk = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local make = algos[algo]
  if not make then
    return redis.error_reply('ERR internal: no multi-name script for algorithm ' .. algo)
  end
  local r = make({unpack(KEYS, k + 1, k + nk)}, {op, conf}, algo)
  k = k + nk
  if r.err then return r end
  names[i] = r
  out[#out + 1], out[#out + 2], out[#out + 3] = r[1], r[2] or '', r[5] or 0
  if r[1] == 0 then r[3].load() end
end

if op == 'undo' then
  for i = 1, n do
    local r = names[i]
    if r[1] == 0 then r[6](tonumber(ARGV[a]), tonumber(ARGV[a + 1])) end
    a = a + 2
  end
else
  local groups = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, groups do
    local m = tonumber(ARGV[a])
    a = a + 1
    local members, decidable = {}, true
    for j = 1, m do
      members[j] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]) * 1000, ARGV[a + 3] == '1'}
      a = a + 4
      if names[members[j][1]][1] ~= 0 then decidable = false end
    end
    if not decidable then
      out[#out + 1] = -2
    else
      local all, res = true, {}
      for j, mem in ipairs(members) do
        local l = names[mem[1]][3]
        if mem[2] > l.capacity then
          res[j] = {-1, l.available(), 0, 0}
        else
          res[j] = {l.try(mem[2], mem[3])}
        end
        if res[j][1] ~= 1 and not mem[4] then all = false end
      end
      if not all then
        for j, mem in ipairs(members) do
          if res[j][1] == 1 then names[mem[1]][3].give(mem[2]) end
        end
      end
      out[#out + 1] = all and 1 or 0
      for j, mem in ipairs(members) do
        local l = names[mem[1]][3]
        local rem = res[j][2]
        if not all then rem = l.available() end
        local o = #out
        out[o + 1], out[o + 2], out[o + 3], out[o + 4] = res[j][1], floor(rem + EPS), us(res[j][3]), us(res[j][4])
      end
    end
  end
end

for i = 1, n do
  local r = names[i]
  if r[1] == 0 then
    r[3].save()
    r[4]()
  end
end
return out
