#!/usr/bin/env bash
# names-floor-loaded.sh: ../shared/bench/names-floor.sh with the floor timed
# under the same load as rlproxy's names calls. That yardstick times
# rlproxy's calls while 50 clients and the proxy share the machine's cores
# with Redis, and names-floor.lua afterwards, alone, back to back (warm
# caches). Here names-floor.lua also runs during each load round, as a
# Redis function (FCALL, counted apart from rlproxy's EVALSHA in
# commandstats) from one client at rlproxy's batch size; then alone, as
# the yardstick does. Prints per round rlproxy's µs per call, the floor's
# under load and alone, and the median ratios.
# usage: names-floor-loaded.sh RLPROXY_BIN [ROUNDS (5)]
# Needs python3 with redis-py (Debian python3-redis). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: names-floor-loaded.sh RLPROXY_BIN [ROUNDS]}
rounds=${2:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/names-floor-loaded.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; rm -rf "$work"' EXIT
me=names-floor-loaded
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh
py=python3
$py -c 'import redis' 2>/dev/null || py=/usr/bin/python3
start_redis
proxy=$(free_port)
"$bin" --listen "127.0.0.1:$proxy" --backend "redis://127.0.0.1:$REDIS_PORT" >"$work/rlproxy.log" 2>&1 &
pids+=($!)
wait_ready "$proxy"
redis-cli -p "$proxy" RL.POLICY SET 'user:*' 100 1h >/dev/null
# The floor as a function: the same body, KEYS/ARGV as its arguments.
{
	echo '#!lua name=floor'
	echo 'redis.register_function("floor", function(KEYS, ARGV)'
	grep -v '^--' ../shared/bench/names-floor.lua
	echo 'end)'
} >"$work/floor.lua"
redis-cli -p "$REDIS_PORT" -x FUNCTION LOAD REPLACE <"$work/floor.lua" >/dev/null

# usec_per_call and calls of one command in commandstats.
stat() { redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[=,:]' -v c="cmdstat_$1" '$1 == c {print $3, $7}'; }
# floor B SECONDS|CALLS: FCALLs of B random names, for SECONDS while a
# file $work/stop is absent (under load), or CALLS of them (alone).
floor() {
	$py - "$REDIS_PORT" "$1" "$2" "$work/stop" <<'PY'
import os, random, redis, sys
r = redis.Redis(port=int(sys.argv[1])); B, n, stop = int(sys.argv[2]), sys.argv[3], sys.argv[4]
def call():
    r.fcall('floor', 1, 'floor', 100, 3600000, 100, *['user:%d' % random.randrange(10000) for _ in range(B)])
if n == 'load':
    while not os.path.exists(stop):
        call()
else:
    for _ in range(int(n)):
        call()
PY
}
load() { redis-benchmark -p "$proxy" -c 50 -n 80000 -r 10000 --csv RL.ACQUIRE user:__rand_int__ 1 >/dev/null; }

# A first round finds rlproxy's batch size.
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
load
read -r calls _ < <(stat evalsha)
batch=$((80000 / calls))
say "$me: rlproxy's names calls carry about $batch names"
: >"$work/rows"
for r in $(seq "$rounds"); do
	redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
	rm -f "$work/stop"
	floor "$batch" load &
	fl=$!
	load
	touch "$work/stop"
	wait "$fl"
	read -r calls rl < <(stat evalsha)
	read -r fcalls loaded < <(stat fcall)
	redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
	floor "$batch" 300
	read -r _ alone < <(stat fcall)
	echo "round $r: rlproxy $rl µs per call ($calls calls); floor under the same load $loaded µs ($fcalls calls), alone $alone µs" >&2
	echo "$rl $loaded $alone" >>"$work/rows"
done
$py - "$work/rows" "$batch" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
print("batch %s names; median µs per call: rlproxy %.1f, floor under load %.1f, floor alone %.1f" % (
    sys.argv[2], st.median(r[0] for r in rows), st.median(r[1] for r in rows), st.median(r[2] for r in rows)))
print("median ratio rlproxy / floor under the same load: %.2f; rlproxy / floor alone (the yardstick's): %.2f" % (
    st.median(r[0] / r[1] for r in rows), st.median(r[0] / r[2] for r in rows)))
PY
