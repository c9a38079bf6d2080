package main

// gcraScript is the direct-to-Redis baseline: a minimal GCRA limiter in the
// style of go-redis/redis_rate (GET the theoretical arrival time, a little
// arithmetic, SET it back with PX). It answers like RL.ACQUIRE does,
// {granted, remaining, retry_after_ms, reset_after_ms}, so one reply
// reader serves both modes.
//
// KEYS[1] the TAT key; ARGV: burst, rate, period_ms, cost.
const gcraScript = `
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3]) * 1000
local cost = tonumber(ARGV[4])
local emission = period / rate
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + emission * cost
local diff = now - (new_tat - emission * burst)
if diff < 0 then
  return {0, 0, math.ceil(-diff / 1000), math.ceil((tat - now) / 1000)}
end
local reset = new_tat - now
redis.call('SET', KEYS[1], string.format('%.17g', new_tat), 'PX', math.max(1, math.ceil(reset / 1000)))
return {1, math.floor(diff / emission), 0, math.ceil(reset / 1000)}
`
