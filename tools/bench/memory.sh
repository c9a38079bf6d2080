#!/usr/bin/env bash
# The proxy's memory per limiter (part of `make bench`; issue 23 item 2):
# RSS of a real rlproxy process after
#   - 100 sliding-log limiters with 512-byte names, SHARDS 1024 and 8
#     limits (7 LIMITs), each acquired once: target <= 100 MB;
#   - MEM_NAMES (300000) ordinary limiters (RL.SETRATE name 100 1s), each
#     acquired once: target <= 300 MB;
#   - one policy (RL.POLICY SET user:* 100 1h) and MEM_POLICY_NAMES
#     (1000000) names under it, acquired at random by redis-benchmark (50
#     connections, pipelines of 16; 3 acquires a name on average, so 95%
#     of the names are used): target <= 150 MB, and flat between 100,000
#     names and all of them;
#   - Redis's memory per name under a policy (RL.POLICY SET 100 1h, each
#     of MEM_REDIS_NAMES (10000) names acquired once), for every
#     algorithm, and per key of the direct baseline (rlbench's minimal
#     GCRA, EVALSHA on key u:<n>; the policies' names are as long: t:<n>,
#     l:<n>, ...), each on a fresh redis-server (used_memory before and
#     after): target token-bucket <= 1.1x GCRA;
# each on a fresh redis-server and rlproxy. Commands go in with
# redis-cli --pipe. Prints one line per case; exits non-zero when a
# target is missed. MEM_RLPROXY: a prebuilt rlproxy to measure instead;
# MEM_CASES: some of "heavy ordinary policy redis" (default: all).
set -euo pipefail
cd "$(dirname "$0")/../.."

NAMES=${MEM_NAMES:-300000}
POLICY_NAMES=${MEM_POLICY_NAMES:-1000000}
REDIS_NAMES=${MEM_REDIS_NAMES:-10000}
CASES=${MEM_CASES:-heavy ordinary policy redis}
GO=${GO:-go}
work=$(mktemp -d "${TMPDIR:-/tmp}/rlmem.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
me=memory
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

if [ -n "${MEM_RLPROXY:-}" ]; then
	cp "$MEM_RLPROXY" "$work/rlproxy"
else
	$GO build -o "$work/rlproxy" ./cmd/rlproxy
fi

# fresh: a new redis-server and rlproxy over it; sets rport, pport and
# ppid (the caller's locals).
fresh() {
	rport=$(free_port)
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize no --dir "$work" --logfile "$work/redis.log" &
	pids+=($!)
	wait_ready "$rport"
	pport=$(free_port)
	"$work/rlproxy" --listen "127.0.0.1:$pport" --backend "redis://127.0.0.1:$rport" --log-level warn 2>"$work/rlproxy.log" &
	ppid=$!
	pids+=("$ppid")
	wait_ready "$pport"
}

# run NAME TARGET_MB GENERATOR: a fresh redis-server and rlproxy, the
# generator's commands piped in, then the proxy's RSS.
failed=0
run() {
	local name=$1 target=$2 gen=$3 rport pport ppid
	fresh
	local before
	before=$(rss_mb "$ppid")
	if [ "$gen" = policy ]; then
		# As an application's traffic comes: 50 connections, pipelines of
		# 16, each request a random name (redis-benchmark's __rand_int__),
		# over 100,000 names, then over all of them: RSS must stay flat.
		redis-cli -p "$pport" RL.POLICY SET user:* 100 1h >/dev/null
		local first
		acquire_random 400000 100000
		first=$(rss_mb "$ppid")
		printf 'memory: %-44s rlproxy RSS %6s MB after 400,000 acquires of 100,000 names\n' "$name" "$first"
		acquire_random $((POLICY_NAMES * 3)) "$POLICY_NAMES"
		printf 'memory: %-44s %s acquires of %s names: %s\n' "$name" $((POLICY_NAMES * 3)) "$POLICY_NAMES" "$(tr '\r' '\n' <"$work/bench.out" | grep -a 'requests per second' | tail -1 || true)"
		local names
		names=$(redis-cli -p "$rport" --scan --pattern 'rlproxy:{policies}:s:*' | grep -v ':long$' |
			while read -r h; do redis-cli -p "$rport" hlen "$h"; done | awk '{ s += $1 } END { print s + 0 }')
		printf 'memory: %-44s %s names with state in Redis now (fields of the policy'"'"'s generation hashes)\n' "$name" "$names"
	else
		gen_cmds "$gen" "$NAMES" >"$work/cmds"
		redis-cli -p "$pport" --pipe <"$work/cmds" >"$work/pipe.out" 2>&1 || { cat "$work/pipe.out" >&2; exit 1; }
		grep -q 'errors: 0' "$work/pipe.out" || { say "memory: $name: errors"; cat "$work/pipe.out" >&2; failed=1; }
	fi
	local after
	after=$(rss_mb "$ppid")
	local verdict=ok
	awk -v a="$after" -v t="$target" 'BEGIN { exit !(a > t) }' && { verdict="OVER the $target MB target"; failed=1; }
	if [ "$gen" = policy ] && awk -v a="$after" -v f="$first" 'BEGIN { exit !(a > 1.25 * f + 10) }'; then
		verdict="$verdict; NOT flat (from $first MB)"
		failed=1
	fi
	printf 'memory: %-44s rlproxy RSS %6s MB before, %6s MB after (target <= %s MB): %s\n' "$name" "$before" "$after" "$target" "$verdict"
	kill "$ppid"
	wait "$ppid" 2>/dev/null || true
}

# acquire_random N NAMES: N RL.ACQUIREs of random names user:<0..NAMES-1>
# through the proxy at $pport, as redis-benchmark sends them.
acquire_random() {
	if ! redis-benchmark -p "$pport" -c 50 -P 16 -n "$1" -r "$2" -q RL.ACQUIRE user:__rand_int__ >"$work/bench.out" 2>&1 ||
		! grep -aq 'requests per second' "$work/bench.out"; then
		say "memory: redis-benchmark failed:"
		tr '\r' '\n' <"$work/bench.out" | tail -5 >&2
		failed=1
	fi
}

# gen_cmds KIND N: the commands of a case, in RESP.
gen_cmds() {
	python3 - "$@" <<'PY'
import sys
gen, names = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
def cmd(*a):
    out.write(b"*%d\r\n" % len(a))
    for x in a:
        x = x.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(x), x))
if gen == "heavy":
    for i in range(100):
        n = ("%03d" % i) + "x" * 509
        args = ["RL.SETRATE", n, "1000000", "1s"]
        for j in range(7):
            args += ["LIMIT", "1000000", "%ds" % (j + 2)]
        args += ["ALGO", "sliding-log", "SHARDS", "1024"]
        cmd(*args)
        for _ in range(8):
            cmd("RL.ACQUIRE", n)
else:
    for i in range(names):
        cmd("RL.SETRATE", "user:%d" % i, "100", "1s")
        cmd("RL.ACQUIRE", "user:%d" % i)
PY
}

# redis_per_name: the Redis side (see the head of this file). Each
# algorithm and the baseline on a fresh redis-server: Redis's key tables
# grow in steps, which would land on whichever ran when one doubled.
redis_per_name() {
	local rport pport ppid sha gcra tb=0 algo p b
	used() { redis-cli -p "$rport" info memory | awk -F: '/^used_memory:/ {print $2 + 0}'; }
	# per_name PORT CMD...: bytes per name that the commands CMD prints,
	# sent to PORT, add (used_memory).
	per_name() {
		local port=$1 before
		shift
		before=$(used)
		"$@" | redis-cli -p "$port" >/dev/null
		awk -v a="$(used)" -v b="$before" -v n="$REDIS_NAMES" 'BEGIN { printf "%.0f", (a - b) / n }'
	}
	gcra_cmds() { seq 0 $((REDIS_NAMES - 1)) | awk -v s="$sha" '{print "EVALSHA " s " 1 u:" $1 " 100 100 3600000 1"}'; }
	acquire_cmds() { seq 0 $((REDIS_NAMES - 1)) | awk -v p="$p" '{print "RL.ACQUIRE " p ":" $1}'; }
	fresh
	sed -n '/^const gcraScript = `/,/^`/p' tools/rlbench/gcra.go | sed '1d;$d' >"$work/gcra.lua"
	sha=$(redis-cli -p "$rport" -x SCRIPT LOAD <"$work/gcra.lua")
	gcra=$(per_name "$rport" gcra_cmds)
	printf 'memory: Redis per name, %s names: direct GCRA key %s B\n' "$REDIS_NAMES" "$gcra"
	for algo in token-bucket leaky-bucket fixed-window sliding-window sliding-log; do
		kill "$ppid"
		fresh
		p=${algo:0:1}
		[ "$algo" = sliding-window ] && p=w
		redis-cli -p "$pport" RL.POLICY SET "$p:*" 100 1h ALGO "$algo" >/dev/null
		redis-cli -p "$pport" RL.ACQUIRE "$p:warm" >/dev/null
		b=$(per_name "$pport" acquire_cmds)
		[ "$algo" = token-bucket ] && tb=$b
		printf 'memory: Redis per name, %s names: policy %-14s %4s B (%s x the GCRA key)\n' "$REDIS_NAMES" "$algo" "$b" \
			"$(awk -v a="$b" -v g="$gcra" 'BEGIN { printf "%.2f", a / g }')"
	done
	if awk -v a="$tb" -v g="$gcra" 'BEGIN { exit !(a > 1.1 * g) }'; then
		printf 'memory: Redis per name: token-bucket %s B is OVER the target (<= 1.1 x GCRA %s B)\n' "$tb" "$gcra"
		failed=1
	fi
	kill "$ppid"
}

case " $CASES " in *" heavy "*) run "100 limiters: 512-byte names, SHARDS 1024, 8 limits" 100 heavy ;; esac
case " $CASES " in *" ordinary "*) run "$NAMES ordinary limiters" 300 ordinary ;; esac
case " $CASES " in *" policy "*) run "$POLICY_NAMES names under one policy" 150 policy ;; esac
case " $CASES " in *" redis "*) redis_per_name ;; esac
exit $failed
