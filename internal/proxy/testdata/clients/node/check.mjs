// The same session as ../python/check.py, through a Node.js client:
// what an application does with rlproxy, checked reply by reply.
//
//	node check.mjs ioredis|node-redis <port> <resp 2|3> <key prefix>
//
// Prints one line per check and exits 1 if any failed.
import assert from "node:assert/strict";
import Redis from "ioredis";
import { createClient } from "redis";

const [lib, port, resp, prefix] = process.argv.slice(2);
const protocol = Number(resp);

// client wraps each library behind the four calls the checks need.
async function client(name) {
  if (lib === "ioredis") {
    const c = new Redis({ host: "127.0.0.1", port: Number(port), protocol, connectionName: name,
      lazyConnect: true, maxRetriesPerRequest: 0 });
    await c.connect();
    return {
      call: (...args) => c.call(...args.map(String)),
      pipeline: async (cmds) => {
        const p = c.pipeline();
        for (const args of cmds) p.call(...args.map(String));
        return (await p.exec()).map(([err, v]) => err ?? v);
      },
      close: () => c.quit(),
    };
  }
  if (lib === "node-redis") {
    const c = createClient({ socket: { host: "127.0.0.1", port: Number(port), reconnectStrategy: false },
      RESP: protocol, name });
    c.on("error", () => {}); // a failed call rejects its own promise
    await c.connect();
    return {
      call: (...args) => c.sendCommand(args.map(String)),
      // Commands sent in the same tick go out in one write (node-redis'
      // own pipelining); its multi().execAsPipeline() would drop every
      // reply when one command fails.
      pipeline: async (cmds) =>
        (await Promise.allSettled(cmds.map((args) => c.sendCommand(args.map(String)))))
          .map((r) => (r.status === "fulfilled" ? r.value : r.reason)),
      close: () => c.quit(),
    };
  }
  throw new Error(`unknown client library ${lib}`);
}

// rejects returns the error a call fails with.
async function rejects(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail("the call succeeded, want an error");
}

const k = (name) => prefix + name;
const c = await client(`${lib}-1`);
const checks = {
  "handshake: CLIENT INFO names the library and protocol": async () => {
    const info = String(await c.call("CLIENT", "INFO"));
    assert.match(info, new RegExp(` resp=${resp} `));
    assert.match(info, lib === "ioredis" ? / lib-name=ioredis / : / lib-name=node-redis /);
    assert.match(info, new RegExp(` name=${lib}-1 `));
  },
  "RL.SETRATE creates, then leaves an identical limiter alone": async () => {
    assert.equal(await c.call("RL.SETRATE", k("api"), 5, "1s"), 1);
    assert.equal(await c.call("RL.SETRATE", k("api"), 5, "1s"), 0);
  },
  "RL.ACQUIRE grants and counts down": async () => {
    const [granted, remaining, retryAfter, resetAfter] = await c.call("RL.ACQUIRE", k("api"), 2);
    assert.deepEqual([granted, remaining, retryAfter], [1, 3, 0]);
    assert.ok(resetAfter > 300 && resetAfter <= 400, `reset_after_ms ${resetAfter}`);
  },
  "a pipeline of RL.ACQUIRE is decided in order": async () => {
    const replies = await c.pipeline(Array.from({ length: 5 }, () => ["RL.ACQUIRE", k("api")]));
    assert.deepEqual(replies.map((r) => r[0]), [1, 1, 1, 0, 0]);
    assert.ok(replies[4][2] > 0 && replies[4][2] <= 200, `retry_after_ms ${replies[4][2]}`);
  },
  "TIMEOUT waits for the next permit": async () => {
    const [granted] = await c.call("RL.ACQUIRE", k("api"), 1, "TIMEOUT", "1s");
    assert.equal(granted, 1);
  },
  "RL.GETRATE: a map under RESP3 (node-redis), pairs otherwise": async () => {
    const got = await c.call("RL.GETRATE", k("api"));
    const fields = { rate: 5, interval_ms: 1000, algo: "token-bucket", burst: 5, shards: 1, mode: "OVERALL", ttl_ms: 0 };
    if (Array.isArray(got)) {
      assert.deepEqual(Object.fromEntries(Array.from({ length: got.length / 2 }, (_, i) => [got[2 * i], got[2 * i + 1]])), fields);
    } else {
      assert.equal(lib === "node-redis" && protocol === 3, true, `a map from ${lib} over RESP${resp}`);
      assert.deepEqual({ ...got }, fields);
    }
    assert.equal(await c.call("RL.GETRATE", k("none")), null);
  },
  "errors arrive as the library's reply errors, and the connection stays": async () => {
    let err = await rejects(c.call("RL.ACQUIRE", k("none")));
    assert.equal(err.message, `ERR no such limiter '${k("none")}' (create it with RL.SETRATE or RL.POLICY SET)`);
    err = await rejects(c.call("RL.ACQUIRE", k("api"), 6));
    assert.equal(err.message, `ERR requested 6 permits but limiter '${k("api")}' holds at most 5 per request`);
    err = await rejects(c.call("RL.SETRATE", k("bad"), 0, "1s"));
    assert.equal(err.message, "ERR rate must be a positive integer, got '0'");
    err = await rejects(c.call("NOSUCH", "x"));
    assert.match(err.message, /^ERR unknown command 'NOSUCH'/);
    assert.equal(await c.call("PING"), "PONG");
  },
  "an error inside a pipeline fails only its own command": async () => {
    const replies = await c.pipeline([["RL.AVAILABLE", k("api")], ["RL.ACQUIRE", k("none")], ["PING"]]);
    assert.equal(typeof replies[0], "number");
    assert.match(replies[1].message, /^ERR no such limiter/);
    assert.equal(replies[2], "PONG");
  },
  "PER_CLIENT: each connection name has its own budget": async () => {
    await c.call("RL.SETRATE", k("per"), 2, "1h", "MODE", "PER_CLIENT");
    const other = await client(`${lib}-2`);
    try {
      for (const who of [c, other]) {
        const replies = await who.pipeline([["RL.ACQUIRE", k("per")], ["RL.ACQUIRE", k("per")], ["RL.ACQUIRE", k("per")]]);
        assert.deepEqual(replies.map((r) => r[0]), [1, 1, 0]);
      }
    } finally {
      await other.close();
    }
  },
  "CL.THROTTLE answers like redis-cell": async () => {
    assert.deepEqual(await c.call("CL.THROTTLE", k("user123"), 15, 30, 60, 1), [0, 16, 15, -1, 2]);
  },
  "GCRA and RL.THROTTLE answer like Redis 8.8 and redis-cell": async () => {
    assert.deepEqual(await c.call("GCRA", k("g"), 1, 1, 0.5), [0, 2, 1, -1, 1]);
    const err = await rejects(c.call("GCRA", k("g"), 1, 1, 0.5, "TOKENS", 0));
    assert.equal(err.message, "ERR value is out of range, value must between 1 and 9223372036854775807");
    assert.deepEqual(await c.call("RL.THROTTLE", k("g2"), 15, 30, 60), [0, 16, 15, -1, 2]);
  },
  "concurrent callers never get more than the limit": async () => {
    await c.call("RL.SETRATE", k("burst"), 10, "1h");
    const replies = await Promise.all(Array.from({ length: 25 }, () => c.call("RL.ACQUIRE", k("burst"))));
    assert.equal(replies.filter((r) => r[0] === 1).length, 10);
  },
  "leases: a worker pool leases, renews, returns; a waiter is woken": async () => {
    assert.equal(await c.call("RL.SETRATE", k("db"), 2, "10s", "ALGO", "concurrency"), 1);
    const held = [];
    for (let i = 0; i < 2; i++) {
      const [granted, , retryAfter, id] = await c.call("RL.LEASE", k("db"), "TTL", "5s");
      assert.deepEqual([granted, retryAfter, typeof id], [1, 0, "string"]);
      held.push(String(id));
    }
    const [granted, , retryAfter, id] = await c.call("RL.LEASE", k("db"));
    assert.equal(granted, 0);
    assert.ok(retryAfter > 4000 && retryAfter <= 5000, `retry_after ${retryAfter}`);
    assert.equal(String(id), "");
    assert.equal(await c.call("RL.RENEW", k("db"), held[0], "TTL", "10s"), 1);
    const other = await client(`${lib}-worker`);
    try {
      const waiting = other.call("RL.LEASE", k("db"), "TIMEOUT", "3s");
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(await c.call("RL.RETURN", k("db"), held[1]), 1);
      const [woke, , , wokeId] = await waiting;
      assert.equal(woke, 1);
      assert.equal(await other.call("RL.RETURN", k("db"), String(wokeId)), 1);
    } finally {
      await other.close();
    }
    assert.equal(await c.call("RL.RETURN", k("db"), held[0]), 1);
    assert.equal(await c.call("RL.AVAILABLE", k("db")), 2);
    assert.match((await rejects(c.call("RL.ACQUIRE", k("db")))).message, /RL\.LEASE/);
  },
  "per-user limits: one RL.POLICY SET, then RL.ACQUIRE per user": async () => {
    assert.equal(await c.call("RL.POLICY", "SET", k("user:*"), 2, "1h"), 1);
    assert.equal(await c.call("RL.POLICY", "SET", k("user:*"), 2, "1h"), 0);
    for (const user of ["alice", "bob"]) {
      assert.deepEqual((await c.call("RL.ACQUIRE", k(`user:${user}`))).slice(0, 2), [1, 1]);
      assert.deepEqual((await c.call("RL.ACQUIRE", k(`user:${user}`))).slice(0, 2), [1, 0]);
      assert.equal((await c.call("RL.ACQUIRE", k(`user:${user}`)))[0], 0);
    }
    assert.equal(String(await c.call("RL.POLICY", "MATCH", k("user:carol"))), k("user:*"));
    assert.equal(await c.call("RL.POLICY", "DEL", k("user:*")), 1);
    const err = await rejects(c.call("RL.ACQUIRE", k("user:alice")));
    assert.equal(err.message, `ERR no such limiter '${k("user:alice")}' (create it with RL.SETRATE or RL.POLICY SET)`);
  },
};

let failed = 0;
for (const [name, check] of Object.entries(checks)) {
  try {
    await check();
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err.message}`);
  }
}
await c.close();
process.exit(failed ? 1 : 0);
