#!/usr/bin/env bash
# Redis time of one policy names call (names.lua, token-bucket, state in
# generation hashes) against ../shared/bench/names-floor.lua (the least a
# batched exact decision costs), script against script on one quiet
# redis-server: no proxy and no load generator compete for the CPUs, so
# the ratio holds on a busy machine where names-floor.sh's cannot.
# usage: [ALGOS='token_bucket fixed_window'] names-cost.sh [BATCH (41)] [ROUNDS (13)] [GIT_REV...]
# ALGOS: the algorithms whose names scripts are measured (limiter/lua
# file names, default token_bucket), each rev's, side by side.
# Each GIT_REV's names script is measured too (limiter/lua at that rev:
# before/after tables). Rounds interleave the scripts; every call asks
# BATCH random names of 10,000 once each, as 50 unpipelined clients'
# calls do. Prints the median and the least Redis µs per call (INFO
# commandstats) and each one's ratio to the floor. Needs python3 with
# redis-py (Debian python3-redis).
set -euo pipefail
cd "$(dirname "$0")/../.."
batch=${1:-41}
rounds=${2:-13}
shift $(($# < 2 ? $# : 2))
floor=${NAMES_FLOOR:-../shared/bench/names-floor.lua}
work=$(mktemp -d "${TMPDIR:-/tmp}/names-cost.XXXXXX")
pids=()
cgroup=
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; rm -rf "$work"' EXIT
me=names-cost
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh
# The working tree's scripts, laid out as a rev's below (scripts.go
# tells which scripts carry calendar.lua).
mkdir -p "$work/tree/limiter"
cp -r limiter/lua limiter/scripts.go "$work/tree/limiter/"
dirs=("$work/tree/limiter/lua")
for rev in "$@"; do
	mkdir -p "$work/$rev"
	git archive "$rev" limiter/lua limiter/scripts.go | tar -x -C "$work/$rev"
	dirs+=("$work/$rev/limiter/lua")
done
start_redis
py=python3
$py -c 'import redis' 2>/dev/null || py=/usr/bin/python3
ALGOS=${ALGOS:-token_bucket} $py - "$REDIS_PORT" "$batch" "$rounds" "$floor" "${dirs[@]}" <<'PY'
import os, random, statistics as st, sys
import redis
port, B, rounds, floor = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dirs = sys.argv[5:]
r = redis.Redis(port=port)

def calendar(d):  # before withCalendar, every script began with calendar.lua
    return 'withCalendar' not in open(d + '/../scripts.go').read()

def names_script(d, algo):
    # As scripts.go builds it: prelude, the algorithm wrapped as
    # new_limit, no multi-limit constructor, names.lua.
    read = lambda f: open('%s/%s' % (d, f)).read()
    cal = calendar(d) or algo == 'fixed_window'
    return ((read('calendar.lua') if cal else '') + read('prelude.lua') + 'local function new_limit(rate, interval, burst, KEYS)\n' +
            read(algo + '.lua') + '\nreturn {capacity = capacity, load = load, save = save, try = try, ' +
            'try_run = try_run,\n  available = available, give = give, charge = charge, reset_us = reset_us}\nend\n' +
            'local new_multi\nlocal bucket_names, window_names = %s, %s\n' % (
                str(algo == 'token_bucket').lower(), str(algo == 'fixed_window').lower()) + read('names.lua'))

def old_format(d):  # before the names op and the unsuffixed generation length
    return "'names'" not in open(d + '/prelude.lua').read()

def grouped(d):  # KEYS: every name's config key, then every name's state key
    return "every name's config key, then" in open(d + '/names.lua').read()

def every(d):  # one ARGV ('*-1') when every name asks 1
    return "('*-1')" in open(d + '/names.lua').read()

epoch = 'e1.3600001p'  # 100 per hour, burst 100: generations of an hour
calls = {}
calls['floor'] = (r.script_load(open(floor).read()),
                  lambda sha, ns: r.evalsha(sha, 1, 'floor', 100, 3600000, 100, *['user:%d' % n for n in ns]))
for d, algo in [(d, a) for d in dirs for a in os.environ['ALGOS'].split()]:
    old = old_format(d)
    conf = '#rl:{policies}:s:%s 3600001%s %s 100 3600000 100' % (epoch, 'p' if old else '', epoch)
    op = 'acquire' if old else 'names'
    def call(sha, ns, conf=conf, op=op, g=grouped(d), e=every(d), u=algo[0]):  # names of its own per algorithm
        c = ['rl:{%s:%012d:0}:c' % (u, n) for n in ns]
        s = ['rl:{%s:%012d:0}:%s:s' % (u, n, epoch) for n in ns]
        keys = c + s if g else [k for pair in zip(c, s) for k in pair]
        return r.evalsha(sha, len(keys), *keys, op, conf, 2, 0, *(['*-1'] if e else [-1] * len(ns)))
    calls['%s %s' % (d.split('/')[-3], algo)] = (r.script_load(names_script(d, algo)), call)
for name, (sha, call) in calls.items():  # every name has state, as after warm-up
    for i in range(0, 10000, B):
        call(sha, range(i, min(10000, i + B)))
us = {name: [] for name in calls}
for _ in range(rounds):
    for name, (sha, call) in calls.items():
        r.config_resetstat()
        for _ in range(100):
            call(sha, [random.randrange(10000) for _ in range(B)])
        us[name].append(r.info('commandstats')['cmdstat_evalsha']['usec_per_call'])
f = us['floor']
print('%d names per call, %d rounds of 100 calls each' % (B, rounds))
for name, u in us.items():
    print('%-40s median %7.1f us/call (x floor %.2f)  least %7.1f (x floor %.2f)' % (
        name if name == 'floor' else 'names.lua ' + name, st.median(u),
        st.median(a / b for a, b in zip(u, f)), min(u), min(u) / min(f)))
PY
