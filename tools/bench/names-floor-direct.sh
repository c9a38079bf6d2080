#!/usr/bin/env bash
# Redis CPU per decision at the batch size of pipelined per-user traffic
# (~430 names per call), side by side on one quiet redis-server:
# ../shared/bench/names-floor.lua (the least a batched exact decision
# costs), names.lua (token bucket, the per-user bench's policy: this tree
# and, given GIT_REV, that rev's) and direct EVALSHA of rlbench's GCRA in
# pipelines of 16 (bench-per-user.sh's "direct"). Says whether the floor
# itself can give 4x direct, and how far names.lua is from it.
# usage: names-floor-direct.sh [BATCH (430)] [ROUNDS (9)] [GIT_REV]
# Needs python3 with redis-py (Debian python3-redis).
set -euo pipefail
cd "$(dirname "$0")/../.."
batch=${1:-430}
rounds=${2:-9}
work=$(mktemp -d "${TMPDIR:-/tmp}/names-floor-direct.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; rm -rf "$work"' EXIT
me=names-floor-direct
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh
before=limiter/lua
if [ -n "${3:-}" ]; then
	git archive "$3" limiter/lua | tar -x -C "$work"
	before=$work/limiter/lua
fi
start_redis
py=python3
$py -c 'import redis' 2>/dev/null || py=/usr/bin/python3
$py - "$REDIS_PORT" "$batch" "$rounds" limiter/lua "$before" ../shared/bench/names-floor.lua tools/rlbench/gcra.go <<'PY'
import random, re, statistics as st, sys
import redis
port, B, rounds, now_dir, before_dir, floor_file, gcra_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
r = redis.Redis(port=port)
gcra = re.search(r'const gcraScript = `(.*?)`', open(gcra_file).read(), re.S).group(1)

def names_script(d):  # as scripts.go builds a token bucket's
    read = lambda f: open('%s/%s' % (d, f)).read()
    return (read('prelude.lua') + 'local function new_limit(rate, interval, burst, KEYS)\n' +
            read('token_bucket.lua') + '\nreturn {capacity = capacity, load = load, save = save, try = try, ' +
            'try_run = try_run,\n  available = available, give = give, charge = charge, reset_us = reset_us}\nend\n' +
            'local new_multi\nlocal bucket_names, window_names = true, false\n' + read('names.lua'))

e = 'e1.2001p'  # 1e9 per second, bench-per-user.sh's policy
conf = '#rlproxy:{policies}:s:%s 2001 %s 1000000000 1000 1000000000' % (e, e)

def names(sha, u):
    def call(ns):
        keys = ['rlproxy:{bench:%s:%d:0}:c' % (u, n) for n in ns] + ['rlproxy:{bench:%s:%d:0}:%s:s' % (u, n, e) for n in ns]
        r.evalsha(sha, len(keys), *keys, 'names', conf, 2, 0, '*-1')
    return call

def direct(ns):
    g = r.script_load(gcra)
    for i in range(0, len(ns), 16):
        p = r.pipeline(transaction=False)
        for n in ns[i:i + 16]:
            p.evalsha(g, 1, 'direct:%d' % n, 1000000000, 1000000000, 1000, 1)
        p.execute()

floor = r.script_load(open(floor_file).read())
calls = {'names-floor.lua': lambda ns: r.evalsha(floor, 1, 'floor', 1000000000, 1000, 1000000000, *['user:%d' % n for n in ns]),
         'names.lua': names(r.script_load(names_script(now_dir)), 'n')}
if before_dir != now_dir:
    calls['names.lua before'] = names(r.script_load(names_script(before_dir)), 'b')
calls['direct, pipelines of 16'] = direct
for call in calls.values():  # every name has state, as after warm-up
    for i in range(0, 10000, B):
        call(list(range(i, min(10000, i + B))))
cpu = {n: [] for n in calls}
n_calls = max(10, 8000 // B)
for _ in range(rounds):
    for name, call in calls.items():
        draws = [[random.randrange(10000) for _ in range(B)] for _ in range(n_calls)]
        c0 = r.info('cpu')
        for ns in draws:
            call(ns)
        c1 = r.info('cpu')
        used = c1['used_cpu_user'] + c1['used_cpu_sys'] - c0['used_cpu_user'] - c0['used_cpu_sys']
        cpu[name].append(used * 1e6 / (n_calls * B))
d = cpu['direct, pipelines of 16']
print('%d names per call, %d interleaved rounds of %d calls; Redis CPU us per decision' % (B, rounds, n_calls))
for name, u in cpu.items():
    print('%-24s median %6.2f (least %5.2f, most %5.2f)  direct / this: %.2fx' % (
        name, st.median(u), min(u), max(u), st.median(a / b for a, b in zip(d, u))))
PY
