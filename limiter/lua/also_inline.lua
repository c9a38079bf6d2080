-- also_inline.lua: also.lua's fast path, the head of its script (see
-- also.go). An acquire whose names are all token buckets or fixed windows
-- (not a calendar month) of one limit each, explicit or governed by a
-- policy whose states are keys of their own, is decided here in straight
-- code, names by position: no store, no limit object, no closure per
-- name, one clock reading and one MGET for every state. Every answer,
-- and every state written, is what the general path (the rest of the
-- script) gives; KEYS, ARGV and the reply are also.lua's. Anything else
-- (undo, a policy's hashes, several limits, another algorithm, a name
-- that is not there or of another epoch) is found before anything is
-- written and left to the general path.
do
  local ceil, floor, max, fmod, match, byte, fmt = math.ceil, math.floor, math.max, math.fmod, string.match, string.byte, string.format
  local EPS = 1e-6
  local n = tonumber(ARGV[2])
  local fast = ARGV[1] == 'acquire'
  -- Per name: bucket (a token bucket, else a fixed window), its state
  -- key, epoch, rate, interval (µs) and burst.
  local bucket, skey, epoch, rate, ivl, burst = {}, {}, {}, {}, {}, {}
  local a = 3
  if fast then
    for i = 1, n do
      local algo, arg = ARGV[a], ARGV[a + 1]
      if ARGV[a + 2] ~= '2' or byte(arg, 1) == 35 then -- '#': a policy's hashes
        fast = false
        break
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
      if byte(arg, 1) == 61 then -- '=': a policy's name
        if redis.call('EXISTS', key) == 1 then
          fast = false
          break
        end
        e, r, iv, b, l = match(arg, '^=(%S+) (%d+) (%d+) (%d+) ?(%S*)$')
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
    local vals = redis.call('MGET', unpack(skey))
    -- The states: a bucket's level (lv), its ts and the level as loaded;
    -- a window's start (lv), count (ts) and the state as read when it is
    -- this window's (stored), as token_bucket.lua's and
    -- fixed_window.lua's load().
    local lv, ts, loaded, out = {}, {}, {}, {}
    for i = 1, n do
      local v, x, y = vals[i], nil, nil
      if v then
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

    -- The states written back as keep() writes them (prelude.lua).
    local function whole(x)
      return x == floor(x) and x < 9e15 and x > -9e15
    end
    local function state2(x, y)
      if whole(y) then return fmt(whole(x) and '%d:%d' or '%.17g:%d', x, y) end
      return (whole(x) and fmt('%d', x) or fmt('%.17g', x)) .. ':' .. fmt('%.17g', y)
    end
    -- Whether key's TTL still runs until u µs from now.
    local function lasts(key, u)
      return redis.call('PTTL', key) >= ceil((now + u) / 1000 - EPS) - floor(now / 1000) - 1
    end
    for i = 1, n do
      local key, u = skey[i], nil
      local value
      if bucket[i] then
        local level = lv[i]
        u = level * ivl[i] / rate[i]
        if level > EPS and (level ~= loaded[i] or not lasts(key, u)) then value = state2(level, ts[i]) end
        if level <= EPS then u = 0 end
      else
        u = until_reset(i)
        value = state2(lv[i], ts[i])
        if u > 0 and value == loaded[i] and lasts(key, u) then value = nil end
      end
      if u <= 0 then
        redis.call('DEL', key)
      elseif value then
        redis.call('SET', key, value, 'PX', max(1, ceil(u / 1000 - EPS)))
      end
    end
    return out
  end
end
