// express.mjs: express-rate-limit with its Redis store (rate-limit-redis),
// both with their defaults (the store's prefix "rl:"), through rlproxy's
// gateway. Usage: node express.mjs <rlproxy port>. Prints one line per
// request and the store's key as the gateway shows it; exits 1 on an error.
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { RedisStore } from 'rate-limit-redis'
import Redis from 'ioredis'

const redis = new Redis({ host: '127.0.0.1', port: Number(process.argv[2]), maxRetriesPerRequest: 0 })
const app = express()
app.use(rateLimit({
  windowMs: 60_000,
  limit: 3,
  store: new RedisStore({ sendCommand: (command, ...args) => redis.call(command, ...args) }),
}))
app.get('/', (req, res) => res.send('hello'))

const server = app.listen(0, '127.0.0.1')
await new Promise((resolve) => server.once('listening', resolve))
try {
  const url = `http://127.0.0.1:${server.address().port}/`
  for (let i = 1; i <= 5; i++) {
    const res = await fetch(url)
    console.log(`request ${i}: ${res.status} remaining=${res.headers.get('x-ratelimit-remaining')}`)
  }
  const keys = await redis.keys('rl:*')
  console.log(`keys: ${keys.join(' ')} ttl>0: ${(await redis.pttl(keys[0])) > 0}`)
} catch (err) {
  console.log(`error: ${err.message}`)
  process.exitCode = 1
} finally {
  server.close()
  redis.disconnect()
}
