-- concurrency.lua: a semaphore with leases (ALGO concurrency), after the
-- shared prelude (which reads the config, checks the epoch, refreshes the
-- limiter's TTL and reads the backend's clock into `now`, microseconds).
-- The config's sub_rate is this sub-limiter's share of the limit and
-- interval_ms the default lease TTL.
--
-- KEYS[2]  leases: sorted set, lease id -> expiry (microseconds). A lease
--          id reads "<shard>.<permits>.<random>": the permits it holds are
--          in its name, so the leases held are the whole state.
-- KEYS[3]  queue of waiters: sorted set, "<permits>:<ticket>" -> arrival
--          (microseconds), served in arrival order
-- KEYS[4]  ticket deadlines: sorted set, the same members -> when the
--          ticket lapses unless its waiter asks again (a waiter whose proxy
--          vanished stops holding up the queue)
-- KEYS[5]  permits held: the sum over KEYS[2] (kept so a call costs
--          O(log N), not O(leases); rebuilt from KEYS[2] if it goes missing)
-- ARGV[1]  op: 'lease' | 'return' | 'renew' | 'cancel' | 'peek'
--          ('acquire' and 'release' are errors: the commands are RL.LEASE
--          and RL.RETURN)
-- ARGV[2]  epoch the caller expects ('' skips the check)
-- ARGV[3..] lease:  permits, ttl_ms (0 = the limiter's lease TTL), the new
--                   lease's id, ticket ('' = does not wait), ticket_ttl_ms
--           return: lease id
--           renew:  lease id, ttl_ms (0 = the limiter's lease TTL)
--           cancel: ticket, permits (the waiter gives up)
-- Reply: {status, epoch, results...} (status as in the prelude)
--   lease:  {granted (1|0; -1 = more permits than the limit), free permits
--            afterwards, retry_after_us (until the earliest lease expires;
--            0 when granted)}
--   return / renew: {1 if the lease was held, else 0}
--   cancel: {0}
--   peek:   {free permits}
-- Whenever permits come free or the queue moves, the waiters at its head
-- whose permits now fit are PUBLISHed (their tickets, space separated) on
-- the channel KEYS[1] .. ':w' (the sub-limiter's, whatever the epoch or
-- client; '*' there, sent by rlproxy, wakes every waiter).
local op = ARGV[1]
if op == 'acquire' or op == 'release' then
  return redis.error_reply('ERR a concurrency limiter takes RL.LEASE and RL.RETURN, not RL.ACQUIRE or RL.RELEASE')
end
local limit = rate
local leases, queue, deadlines, channel = KEYS[2], KEYS[3], KEYS[4], KEYS[1] .. ':w'

local function permits_of(member)
  return tonumber(string.match(member, '^%d+%.(%d+)%.')) or 0
end

-- Expired leases go; the rest are the permits held. held_before is the
-- count as stored (nil when missing), so a purge is written back too.
local count = KEYS[5]
local held = tonumber(redis.call('GET', count))
local held_before = held
local freed = false
if held then
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  if #expired > 0 then
    for _, id in ipairs(expired) do held = held - permits_of(id) end
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    freed = true
  end
else
  -- No count (a new epoch, or lost): rebuild it from the leases.
  freed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) > 0
  held = 0
  for _, id in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    held = held + permits_of(id)
  end
end
local function free()
  return math.max(0, limit - held)
end

-- Lapsed tickets leave the queue.
local moved = false
local lapsed = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now)
if #lapsed > 0 then
  redis.call('ZREM', deadlines, unpack(lapsed))
  redis.call('ZREM', queue, unpack(lapsed))
  moved = true
end

local function ticket_permits(member)
  return tonumber(string.match(member, '^(%d+):')) or 0
end

-- Permits wanted by the waiters queued before member (all of them when
-- member is not queued).
local function ahead(member)
  local rank = member and redis.call('ZRANK', queue, member)
  local stop = -1
  if rank then
    if rank == 0 then return 0 end
    stop = rank - 1
  end
  local sum = 0
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, stop)) do
    sum = sum + ticket_permits(m)
  end
  return sum
end

-- Tells the waiters at the head of the queue whose permits fit now.
local function wake()
  local room, names = free(), {}
  if room <= 0 then return end
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, 63)) do
    local n = ticket_permits(m)
    if n > room then break end
    room = room - n
    names[#names + 1] = string.match(m, ':(.*)$')
  end
  if #names > 0 then
    redis.call('PUBLISH', channel, table.concat(names, ' '))
  end
end

-- Every key lives as long as what it holds: the leases until the last
-- expires, the queue until the last ticket lapses (by, the sorted set
-- whose scores say when).
local function expire(key, by)
  local last = redis.call('ZRANGE', by or key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.max(1, ms(tonumber(last[2]) - now)))
  end
end

local function lease_ttl(arg)
  local t = tonumber(arg) or 0
  if t <= 0 then return interval end
  return t * 1000
end

local out = {0, conf[1]}
local changed_leases = false
if op == 'lease' then
  local n, ttl, id, ticket = tonumber(ARGV[3]), lease_ttl(ARGV[4]), ARGV[5], ARGV[6]
  local member = nil
  if ticket ~= '' then member = n .. ':' .. ticket end
  if n > limit then
    out[3], out[4], out[5] = -1, free(), 0
  elseif n <= free() and ahead(member) + n <= free() then
    -- (The queue is summed only when the permits are free: a waiter's
    -- refresh while none are costs O(log N), however long the queue.)
    redis.call('ZADD', leases, now + ttl, id)
    held = held + n
    changed_leases = true
    if member and redis.call('ZREM', queue, member) > 0 then
      redis.call('ZREM', deadlines, member)
      moved = true
    end
    out[3], out[4], out[5] = 1, free(), 0
  else
    if member then
      redis.call('ZADD', queue, 'NX', now, member)
      redis.call('ZADD', deadlines, now + tonumber(ARGV[7]) * 1000, member)
      expire(deadlines)
      expire(queue, deadlines)
    end
    local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    local retry = 1000
    if first[2] then retry = math.max(1, tonumber(first[2]) - now) end
    out[3], out[4], out[5] = 0, free(), math.ceil(retry)
  end
elseif op == 'return' then
  local id = ARGV[3]
  if redis.call('ZREM', leases, id) > 0 then
    held = held - permits_of(id)
    freed, changed_leases = true, true
    out[3] = 1
  else
    out[3] = 0
  end
elseif op == 'renew' then
  local id = ARGV[3]
  if redis.call('ZSCORE', leases, id) then
    redis.call('ZADD', leases, 'XX', now + lease_ttl(ARGV[4]), id)
    changed_leases = true
    out[3] = 1
  else
    out[3] = 0
  end
elseif op == 'cancel' then
  local member = ARGV[4] .. ':' .. ARGV[3]
  if redis.call('ZREM', queue, member) > 0 then
    redis.call('ZREM', deadlines, member)
    moved = true
  end
  out[3] = 0
else
  out[3] = free()
end
if changed_leases or freed then expire(leases) end
-- The count lives exactly as long as the leases it sums.
if held <= 0 or redis.call('EXISTS', leases) == 0 then
  redis.call('DEL', count)
elseif held ~= held_before or changed_leases then
  redis.call('SET', count, held)
  expire(count, leases)
end
if freed or moved then wake() end
return out
