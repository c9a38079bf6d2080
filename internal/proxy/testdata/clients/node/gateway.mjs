// An application's session through rlproxy's gateway (passthrough on):
// ordinary Redis commands and RL.ACQUIRE through one connection URL, with
// ioredis. The same session as ../python/gateway.py.
//
//	node gateway.mjs <port> <resp 2|3> <key prefix>
//
// RLPROXY_CLUSTER=1: the proxy is on a Redis Cluster, where SCAN is refused.
// Exits 1 at the first reply that is not the expected one.
import assert from "node:assert/strict";
import Redis from "ioredis";

const [port, resp, p] = process.argv.slice(2);
const url = `redis://127.0.0.1:${port}/0`;
const open = () => new Redis(url, { protocol: Number(resp), maxRetriesPerRequest: 0 });
const r = open();

async function check(name, got, want) {
  assert.deepEqual(await got, want, name);
  console.log(`ok ${name}`);
}

await check("SET", r.set(p + "s", "v"), "OK");
await check("GET", r.get(p + "s"), "v");
await check("GET missing", r.get(p + "missing"), null);
await r.hset(p + "h", "a", "1", "b", "2");
await check("HGETALL", r.hgetall(p + "h"), { a: "1", b: "2" });

const blocked = open();
const popped = blocked.blpop(p + "list", 10);
await new Promise((ok) => setTimeout(ok, 200));
await check("SET while BLPOP waits", r.set(p + "during", "1"), "OK");
await r.rpush(p + "list", "x");
await check("BLPOP", popped, [p + "list", "x"]);
blocked.disconnect();

const tx = open();
await tx.set(p + "w", "1");
await tx.watch(p + "w");
await check("WATCH MULTI EXEC", tx.multi().set(p + "w", "2").incr(p + "w").exec(), [[null, "OK"], [null, 3]]);
tx.disconnect();

const sub = open();
const got = new Promise((ok) => sub.on("message", (channel, message) => ok([channel, message])));
await sub.subscribe(p + "chan");
await r.publish(p + "chan", "hello");
await check("message", got, [p + "chan", "hello"]);
await sub.unsubscribe();
sub.disconnect();

if (process.env.RLPROXY_CLUSTER) {
  await check("SCAN refused in cluster mode", r.scan(0).then(() => "a reply", (e) => e.message),
    "ERR 'scan' is not supported by rlproxy in cluster mode");
} else {
  const [, keys] = await r.scan(0, "MATCH", p + "*", "COUNT", 1000);
  await check("SCAN", [p + "s", p + "h", p + "w"].every((k) => keys.includes(k)), true);
}
await check("EVAL", r.eval("return redis.call('GET', KEYS[1]) .. ARGV[1]", 1, p + "s", "!"), "v!");
await check("RL.SETRATE", r.call("RL.SETRATE", p + "lim", "2", "1s"), 1);
await check("RL.ACQUIRE", r.call("RL.ACQUIRE", p + "lim").then((v) => v.slice(0, 2)), [1, 1]);
await check("RL.ACQUIRE", r.call("RL.ACQUIRE", p + "lim").then((v) => v.slice(0, 2)), [1, 0]);
await check("RL.ACQUIRE denied", r.call("RL.ACQUIRE", p + "lim").then((v) => v[0]), 0);
r.disconnect();
console.log("ok gateway session");
