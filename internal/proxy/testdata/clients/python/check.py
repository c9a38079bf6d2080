"""The same session as ../node/check.mjs, through redis-py: what an
application does with rlproxy, checked reply by reply.

    python3 check.py <port> <key prefix>

Prints one line per check and exits 1 if any failed.
"""
import sys
from concurrent.futures import ThreadPoolExecutor

import redis

port, prefix = int(sys.argv[1]), sys.argv[2]


def k(name):
    return prefix + name


def client(name):
    return redis.Redis(host="127.0.0.1", port=port, client_name=name, decode_responses=True)


def error_of(f, *args):
    try:
        f(*args)
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError("the call succeeded, want an error")


c = client("redis-py-1")


def handshake():
    info = c.client_info()  # parses Redis's CLIENT INFO fields, numbers with int()
    assert info["name"] == "redis-py-1" and info["resp"] == "2", info
    assert isinstance(info["idle"], int) and info["cmd"] == "client|info", info


def setrate():
    assert c.execute_command("RL.SETRATE", k("api"), 5, "1s") == 1
    assert c.execute_command("RL.SETRATE", k("api"), 5, "1s") == 0


def acquire():
    granted, remaining, retry_after, reset_after = c.execute_command("RL.ACQUIRE", k("api"), 2)
    assert [granted, remaining, retry_after] == [1, 3, 0], (granted, remaining, retry_after)
    assert 300 < reset_after <= 400, reset_after


def pipeline():
    p = c.pipeline(transaction=False)
    for _ in range(5):
        p.execute_command("RL.ACQUIRE", k("api"))
    replies = p.execute()
    assert [r[0] for r in replies] == [1, 1, 1, 0, 0], replies
    assert 0 < replies[4][2] <= 200, replies


def timeout():
    assert c.execute_command("RL.ACQUIRE", k("api"), 1, "TIMEOUT", "1s")[0] == 1


def getrate():
    got = c.execute_command("RL.GETRATE", k("api"))
    assert dict(zip(got[::2], got[1::2])) == {
        "rate": 5, "interval_ms": 1000, "algo": "token-bucket", "burst": 5, "shards": 1, "mode": "OVERALL", "ttl_ms": 0,
    }, got
    assert c.execute_command("RL.GETRATE", k("none")) is None


def errors():
    # redis-py drops the "ERR " of an error reply.
    got = error_of(c.execute_command, "RL.ACQUIRE", k("none"))
    assert got == f"no such limiter '{k('none')}' (create it with RL.SETRATE or RL.POLICY SET)", got
    got = error_of(c.execute_command, "RL.ACQUIRE", k("api"), 6)
    assert got == f"requested 6 permits but limiter '{k('api')}' holds at most 5 per request", got
    got = error_of(c.execute_command, "RL.SETRATE", k("bad"), 0, "1s")
    assert got == "rate must be a positive integer, got '0'", got
    assert error_of(c.execute_command, "NOSUCH", "x").startswith("unknown command 'NOSUCH'")
    assert c.ping() is True


def pipeline_error():
    p = c.pipeline(transaction=False)
    p.execute_command("RL.AVAILABLE", k("api"))
    p.execute_command("RL.ACQUIRE", k("none"))
    p.ping()
    available, err, pong = p.execute(raise_on_error=False)
    assert isinstance(available, int) and pong is True, (available, pong)
    assert isinstance(err, redis.ResponseError) and str(err).startswith("no such limiter"), err


def per_client():
    c.execute_command("RL.SETRATE", k("per"), 2, "1h", "MODE", "PER_CLIENT")
    other = client("redis-py-2")
    for who in (c, other):
        p = who.pipeline(transaction=False)
        for _ in range(3):
            p.execute_command("RL.ACQUIRE", k("per"))
        assert [r[0] for r in p.execute()] == [1, 1, 0]
    other.close()


def throttle():
    assert c.execute_command("CL.THROTTLE", k("user123"), 15, 30, 60, 1) == [0, 16, 15, -1, 2]


def gcra():
    # Redis 8.8's proposed GCRA (sent raw: redis-py does not bind it) and
    # RL.THROTTLE share CL.THROTTLE's state.
    assert c.execute_command("GCRA", k("g"), 1, 1, 0.5) == [0, 2, 1, -1, 1]
    err = error_of(c.execute_command, "GCRA", k("g"), 1, 1, 0.5, "TOKENS", 0)
    assert err == "value is out of range, value must between 1 and 9223372036854775807", err
    assert c.execute_command("RL.THROTTLE", k("g2"), 15, 30, 60) == [0, 16, 15, -1, 2]


def concurrent():
    c.execute_command("RL.SETRATE", k("burst"), 10, "1h")
    with ThreadPoolExecutor(max_workers=8) as pool:  # 8 pooled connections
        replies = list(pool.map(lambda _: c.execute_command("RL.ACQUIRE", k("burst")), range(25)))
    assert sum(r[0] for r in replies) == 10, replies


def leases():
    # A worker pool of 2: lease, renew while working, return; a third
    # worker waits and is woken by a return made on another connection.
    assert c.execute_command("RL.SETRATE", k("db"), 2, "10s", "ALGO", "concurrency") == 1
    held = []
    for _ in range(2):
        granted, remaining, retry_after, lease_id = c.execute_command("RL.LEASE", k("db"), "TTL", "5s")
        assert granted == 1 and retry_after == 0 and isinstance(lease_id, str) and lease_id, lease_id
        held.append(lease_id)
    assert remaining == 0
    granted, _, retry_after, lease_id = c.execute_command("RL.LEASE", k("db"))
    assert granted == 0 and 4000 < retry_after <= 5000 and lease_id == "", (granted, retry_after, lease_id)
    assert c.execute_command("RL.RENEW", k("db"), held[0], "TTL", "10s") == 1
    other = client("redis-py-worker")
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(other.execute_command, "RL.LEASE", k("db"), "TIMEOUT", "3s")
        assert c.execute_command("RL.RETURN", k("db"), held[1]) == 1
        granted, _, _, lease_id = waiting.result()
    assert granted == 1 and lease_id, lease_id
    assert other.execute_command("RL.RETURN", k("db"), lease_id) == 1
    assert c.execute_command("RL.RETURN", k("db"), lease_id) == 0  # not held any more
    assert c.execute_command("RL.RETURN", k("db"), held[0]) == 1
    assert c.execute_command("RL.AVAILABLE", k("db")) == 2
    got = error_of(c.execute_command, "RL.ACQUIRE", k("db"))
    assert "RL.LEASE" in got, got
    other.close()


def policy():
    # Per-user limits: one RL.POLICY SET at start, then RL.ACQUIRE per
    # request for whichever user comes; each user has its own budget.
    assert c.execute_command("RL.POLICY", "SET", k("user:*"), 2, "1h") == 1
    assert c.execute_command("RL.POLICY", "SET", k("user:*"), 2, "1h") == 0
    for user in ("alice", "bob"):
        assert c.execute_command("RL.ACQUIRE", k("user:" + user))[:2] == [1, 1]
        assert c.execute_command("RL.ACQUIRE", k("user:" + user))[:2] == [1, 0]
        assert c.execute_command("RL.ACQUIRE", k("user:" + user))[0] == 0
    assert c.execute_command("RL.POLICY", "MATCH", k("user:carol")) == k("user:*")
    rate = c.execute_command("RL.GETRATE", k("user:carol"))
    assert rate[-2:] == ["policy", k("user:*")], rate
    assert c.execute_command("RL.POLICY", "DEL", k("user:*")) == 1
    got = error_of(c.execute_command, "RL.ACQUIRE", k("user:alice"))
    assert got == f"no such limiter '{k('user:alice')}' (create it with RL.SETRATE or RL.POLICY SET)", got


checks = [
    ("handshake: client_info() parses CLIENT INFO", handshake),
    ("RL.SETRATE creates, then leaves an identical limiter alone", setrate),
    ("RL.ACQUIRE grants and counts down", acquire),
    ("a pipeline of RL.ACQUIRE is decided in order", pipeline),
    ("TIMEOUT waits for the next permit", timeout),
    ("RL.GETRATE: field/value pairs", getrate),
    ("errors arrive as ResponseError, and the connection stays", errors),
    ("an error inside a pipeline fails only its own command", pipeline_error),
    ("PER_CLIENT: each connection name has its own budget", per_client),
    ("CL.THROTTLE answers like redis-cell", throttle),
    ("GCRA and RL.THROTTLE answer like Redis 8.8 and redis-cell", gcra),
    ("concurrent callers never get more than the limit", concurrent),
    ("leases: a worker pool leases, renews, returns; a waiter is woken", leases),
    ("per-user limits: one RL.POLICY SET, then RL.ACQUIRE per user", policy),
]
failed = 0
for name, check in checks:
    try:
        check()
        print("ok  ", name)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the next check runs
        failed += 1
        print("FAIL", name + ":", repr(e))
c.close()
sys.exit(1 if failed else 0)
