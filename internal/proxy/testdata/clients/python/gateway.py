"""An application's session through rlproxy's gateway (passthrough on):
ordinary Redis commands and RL.ACQUIRE through one connection URL, with
redis-py. The same session as ../node/gateway.mjs.

    python3 gateway.py <port> <key prefix>

RLPROXY_CLUSTER=1: the proxy is on a Redis Cluster, where SCAN is refused.
Exits non-zero at the first reply that is not the expected one.
"""
import os
import sys
import threading
import time

import redis

port, p = int(sys.argv[1]), sys.argv[2]
r = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0", decode_responses=True)


def check(name, got, want):
    if got != want:
        print(f"FAIL {name}: got {got!r}, want {want!r}")
        sys.exit(1)
    print(f"ok {name}")


check("SET", r.set(p + "s", "v"), True)
check("GET", r.get(p + "s"), "v")
check("GET missing", r.get(p + "missing"), None)
r.hset(p + "h", mapping={"a": "1", "b": "2"})
check("HGETALL", r.hgetall(p + "h"), {"a": "1", "b": "2"})

popped = []
t = threading.Thread(target=lambda: popped.append(r.blpop([p + "list"], timeout=10)))
t.start()
time.sleep(0.2)
check("SET while BLPOP waits", r.set(p + "during", "1"), True)
r.rpush(p + "list", "x")
t.join()
check("BLPOP", list(popped[0]), [p + "list", "x"])

r.set(p + "w", "1")
with r.pipeline() as pipe:
    pipe.watch(p + "w")
    n = int(pipe.get(p + "w"))
    pipe.multi()
    pipe.set(p + "w", n + 1)
    pipe.incr(p + "w")
    check("WATCH MULTI EXEC", pipe.execute(), [True, 3])

ps = r.pubsub()
ps.subscribe(p + "chan")
check("SUBSCRIBE", ps.get_message(timeout=5)["type"], "subscribe")
r.publish(p + "chan", "hello")
msg = ps.get_message(timeout=5)
check("message", (msg["type"], msg["channel"], msg["data"]), ("message", p + "chan", "hello"))
ps.unsubscribe()
ps.close()

if os.environ.get("RLPROXY_CLUSTER"):
    try:
        r.scan(0)
        check("SCAN refused in cluster mode", "a reply", "an error")
    except redis.ResponseError as e:
        check("SCAN refused in cluster mode", str(e), "'scan' is not supported by rlproxy in cluster mode")
else:
    check("SCAN", set(r.scan_iter(match=p + "*")) >= {p + "s", p + "h", p + "w"}, True)
check("EVAL", r.eval("return redis.call('GET', KEYS[1]) .. ARGV[1]", 1, p + "s", "!"), "v!")
check("RL.SETRATE", r.execute_command("RL.SETRATE", p + "lim", 2, "1s"), 1)
check("RL.ACQUIRE", r.execute_command("RL.ACQUIRE", p + "lim")[:2], [1, 1])
check("RL.ACQUIRE", r.execute_command("RL.ACQUIRE", p + "lim")[:2], [1, 0])
check("RL.ACQUIRE denied", r.execute_command("RL.ACQUIRE", p + "lim")[0], 0)
print("ok gateway session")
