-- also_inline.lua: also.lua's fast path, the head of its script (see
-- also.go). An acquire whose names are all token buckets or fixed windows
-- (not a calendar month) of one limit each, explicit or governed by a
-- policy (keys of their own, or one policy's hashes), is decided here in
-- straight code, names by position: no store, no limit object, no
-- closure per name, one clock reading, one MGET for the states of their
-- own, one HMGET of the hashes. Every answer, and every state written, is
-- what the general path (the rest of the script) gives; KEYS, ARGV and
-- the reply are also.lua's. Anything else (undo, several limits, another
-- algorithm, a name that is not there or of another epoch, the hashes of
-- two policies, a state that lasts past the hashes alive) is found
-- before anything is written and left to the general path.
do
  local ceil, floor, max, fmod, match, byte, fmt = math.ceil, math.floor, math.max, math.fmod, string.match, string.byte, string.format
  local EPS = 1e-6
  local n = tonumber(ARGV[2])
  local fast = ARGV[1] == 'acquire'
  -- Per name: bucket (a token bucket, else a fixed window), its state
  -- key, epoch, rate, interval (µs) and burst.
  local bucket, skey, epoch, rate, ivl, burst = {}, {}, {}, {}, {}, {}
  -- The names whose states are in a policy's hashes (hashed[i]: true),
  -- that policy's hash prefix and gen_ms (one policy's at most), and
  -- whether its states are packed doubles (prelude.lua).
  local hashed, hp, gms = {}, nil, nil
  local struct = rawget(_G, 'struct')
  local a = 3
  if fast then
    for i = 1, n do
      local algo, arg = ARGV[a], ARGV[a + 1]
      if ARGV[a + 2] ~= '2' then
        fast = false
        break
      end
      if byte(arg, 1) == 35 then -- '#': a policy's hashes
        local h, g = match(arg, '^#(%S+) (%d+) ')
        if not h or (hp and (h ~= hp or tonumber(g) ~= gms)) then
          fast = false
          break
        end
        hp, gms, hashed[i] = h, tonumber(g), true
      end
      bucket[i] = algo == 'token-bucket'
      if not bucket[i] and algo ~= 'fixed-window' then
        fast = false
        break
      end
      skey[i] = KEYS[2 * i]
      a = a + 3
    end
  end
  if fast then
    -- The configs, as prelude.lua's read_conf reads them.
    for i = 1, n do
      local key, arg = KEYS[2 * i - 1], ARGV[3 * i + 1]
      local e, r, iv, b, l
      local kind = byte(arg, 1)
      if kind == 61 or kind == 35 then -- '=', '#': a policy's name
        if redis.call('EXISTS', key) == 1 then
          fast = false
          break
        end
        if kind == 61 then
          e, r, iv, b, l = match(arg, '^=(%S+) (%d+) (%d+) (%d+) ?(%S*)$')
        else
          e, r, iv, b, l = match(arg, '^#%S+ %d+ (%S+) (%d+) (%d+) (%d+) ?(%S*)$')
        end
      else
        local c = redis.call('HMGET', key, 'epoch', 'sub_rate', 'interval_ms', 'sub_burst', 'ttl_ms', 'sub_limits')
        if not c[1] or (arg ~= '' and arg ~= c[1]) then
          fast = false
          break
        end
        e, r, iv, b, l = c[1], c[2], c[3], c[4], c[6] or ''
        local ttl = tonumber(c[5])
        if ttl > 0 and redis.call('PTTL', key) < ttl then
          redis.call('PEXPIRE', key, ttl)
        end
      end
      if not e or l ~= '' then
        fast = false
        break
      end
      epoch[i], rate[i], ivl[i], burst[i] = e, tonumber(r), tonumber(iv) * 1000, tonumber(b)
      if not bucket[i] and ivl[i] == 2629746 * 1000000 then -- a calendar month
        fast = false
        break
      end
    end
  end
  if fast then
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
    local function us(x)
      if x <= 0 then return 0 end
      return ceil(x - 1000 * EPS)
    end
    -- The states: keys of their own with one MGET; a policy's hashes as
    -- prelude.lua's prefetch reads them (the first generation alive with
    -- its MARK, then the second), was[key] where (0, 1). A state missed
    -- there while the policy has states of their own (booked ahead,
    -- debt) is left to the general path.
    local vals, was, own, hk = {}, {}, {}, {}
    for i = 1, n do
      if hashed[i] then hk[#hk + 1] = skey[i] else own[#own + 1] = skey[i] end
    end
    if #own > 0 then
      own = redis.call('MGET', unpack(own))
    end
    local gen, gens, marked
    if hp then
      gen = floor(now / 1000 / gms) + 1
      gens = {[0] = hp .. ':' .. gen, [1] = hp .. ':' .. (gen + 1)}
      local got = redis.call('HMGET', gens[0], '', unpack(hk)) -- '': MARK
      marked = got[1] ~= false
      local missed = {}
      for j = 1, #hk do
        if got[j + 1] then vals[hk[j]], was[hk[j]] = got[j + 1], 0 else missed[#missed + 1] = hk[j] end
      end
      if #missed > 0 then
        got = redis.call('HMGET', gens[1], unpack(missed))
        local left = false
        for j = 1, #missed do
          if got[j] then vals[missed[j]], was[missed[j]] = got[j], 1 else left = true end
        end
        if left and redis.call('EXISTS', hp .. ':long') == 1 then fast = false end
      end
    end
    local spack, sunpack = struct and struct.pack, struct and struct.unpack
    -- The states: a bucket's level (lv), its ts and the level as loaded;
    -- a window's start (lv), count (ts) and the state as read when it is
    -- this window's (stored), as token_bucket.lua's and
    -- fixed_window.lua's load().
    local lv, ts, loaded, out, o = {}, {}, {}, {}, 0
    for i = 1, n do
      local v, x, y
      if hashed[i] then
        v = vals[skey[i]]
      else
        o = o + 1
        v = own[o]
      end
      if not v then
        v = nil
      elseif hashed[i] and struct then
        if #v == 16 then x, y = sunpack('<dd', v) end
      else
        x, y = match(v, '^([^:]+):(.+)$')
        x, y = tonumber(x), tonumber(y)
      end
      if bucket[i] then
        local level, t = x or 0, y or now
        if now > t then
          level = max(0, level - (now - t) / (ivl[i] / rate[i]))
          t = now
        end
        lv[i], ts[i], loaded[i] = level, t, level
      else
        local iv = ivl[i]
        local start, count, stored = now - fmod(now, iv), 0, nil
        if x and y then
          local s = x - fmod(x, iv)
          if s >= start then
            start, count, stored = s, y, v
          elseif y > rate[i] then
            count = max(0, y - floor((start - s) / iv + 0.5) * rate[i])
          end
        end
        lv[i], ts[i], loaded[i] = start, count, stored
      end
      out[3 * i - 2], out[3 * i - 1], out[3 * i] = 0, epoch[i], now
    end

    -- A window's µs until every window is empty again.
    local function until_reset(i)
      local start, count, r = lv[i], ts[i], rate[i]
      if count > 0 then return start + max(1, max(0, ceil((count - r) / r - EPS)) + 1) * ivl[i] - now end
      return start - now
    end
    -- What name i has left.
    local function available(i)
      if bucket[i] then return max(0, burst[i] - lv[i]) end
      if lv[i] > now then return 0 end
      return max(0, rate[i] - ts[i])
    end

    a = 3 + 3 * n
    local groups = tonumber(ARGV[a])
    a = a + 1
    for _ = 1, groups do
      local m, first = tonumber(ARGV[a]), a + 1
      a = first + 4 * m
      local o, all = #out, true
      for j = first, a - 1, 4 do
        local i, p = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
        local g, retry, reset = -1, 0, 0
        if bucket[i] then
          -- token_bucket.lua's try.
          local level, b, pp = lv[i], burst[i], ivl[i] / rate[i]
          if p <= b then
            local over = (level + p - b) * pp
            if level + p <= b + EPS or over <= tonumber(ARGV[j + 2]) * 1000 then
              level = level + p
              lv[i] = level
              g, retry = 1, max(0, over)
            else
              g, retry = 0, over
            end
            reset = level * pp
          end
        else
          -- fixed_window.lua's try (a window does not wait).
          local start, count, r = lv[i], ts[i], rate[i]
          if p <= r then
            local cur = start <= now
            if cur and count + p <= r + EPS then
              ts[i], g = count + p, 1
            else
              g = 0
              retry = start + max(cur and 1 or 0, max(0, ceil((count + p - r) / r - EPS))) * ivl[i] - now
            end
            reset = until_reset(i)
          end
        end
        if g ~= 1 and ARGV[j + 3] ~= '1' then all = false end
        local x = o + 1 + (j - first)
        out[x + 1], out[x + 2], out[x + 3], out[x + 4] = g, available(i), us(retry), us(reset)
      end
      out[o + 1] = all and 1 or 0
      for j = first, a - 1, 4 do
        local i, x = tonumber(ARGV[j]), o + 1 + (j - first)
        if not all then
          if out[x + 1] == 1 then
            local p = tonumber(ARGV[j + 1])
            if bucket[i] then lv[i] = max(0, lv[i] - p) else ts[i] = max(0, ts[i] - p) end
          end
          out[x + 2] = available(i)
        end
        out[x + 2] = floor(out[x + 2] + EPS)
      end
    end

    -- The states written back as keep() writes them (prelude.lua): the
    -- writes are planned first, as a state that must outlast the hashes
    -- alive is left to the general path, before anything is written.
    local function whole(x)
      return x == floor(x) and x < 9e15 and x > -9e15
    end
    local function state2(i, x, y)
      if hashed[i] and struct then return spack('<dd', x, y) end
      if whole(y) then return fmt(whole(x) and '%d:%d' or '%.17g:%d', x, y) end
      return (whole(x) and fmt('%d', x) or fmt('%.17g', x)) .. ':' .. fmt('%.17g', y)
    end
    -- The generation a state lasting u µs from now goes in, and whether
    -- key's state (name i's) still lasts that long where it is.
    local function gen_of(u)
      return ceil(ceil((now + u) / 1000 - EPS) / gms)
    end
    local function lasts(i, key, u)
      if hashed[i] then return was[key] ~= nil and gen + was[key] == gen_of(u) end
      return redis.call('PTTL', key) >= ceil((now + u) / 1000 - EPS) - floor(now / 1000) - 1
    end
    local writes, sets, dels = {}, {[0] = {}, [1] = {}}, {[0] = {}, [1] = {}}
    for i = 1, n do
      local key, u, value = skey[i], nil, nil
      if bucket[i] then
        local level = lv[i]
        u = level * (ivl[i] / rate[i])
        if level > EPS and (level ~= loaded[i] or not lasts(i, key, u)) then value = state2(i, level, ts[i]) end
        if level <= EPS then u = 0 end
      else
        u = until_reset(i)
        value = state2(i, lv[i], ts[i])
        if u > 0 and value == loaded[i] and lasts(i, key, u) then value = nil end
      end
      if not hashed[i] then
        if u <= 0 then
          writes[#writes + 1] = {key}
        elseif value then
          writes[#writes + 1] = {key, value, max(1, ceil(u / 1000 - EPS))}
        end
      elseif u <= 0 then
        local w = was[key]
        if w then dels[w][#dels[w] + 1] = key end
      elseif value then
        local g = gen_of(u) - gen
        if g ~= 0 and g ~= 1 then
          fast = false -- a state of its own (prelude.lua's keep)
        else
          local w = was[key]
          if w and w ~= g then dels[w][#dels[w] + 1] = key end
          local l = sets[g]
          l[#l + 1], l[#l + 2] = key, value
        end
      end
    end
    if fast then
      for _, w in ipairs(writes) do
        if w[2] then
          redis.call('SET', w[1], w[2], 'PX', w[3])
        else
          redis.call('DEL', w[1])
        end
      end
      if hp then
        -- prelude.lua's flush().
        local first = sets[0]
        if #first > 0 and not marked then
          first[#first + 1], first[#first + 2] = '', '1'
        end
        for g = 0, 1 do
          if #sets[g] > 0 then
            redis.call('HSET', gens[g], unpack(sets[g]))
            if g == 1 or not marked then
              redis.call('PEXPIREAT', gens[g], (gen + g + 1) * gms)
            end
          end
        end
        if #first > 0 and not marked then
          redis.call('UNLINK', hp .. ':' .. (gen - 1))
        end
        for g = 0, 1 do
          if #dels[g] > 0 then redis.call('HDEL', gens[g], unpack(dels[g])) end
        end
      end
      return out
    end
  end
end
