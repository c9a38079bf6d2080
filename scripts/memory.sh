#!/usr/bin/env bash
# The proxy's memory per limiter (part of `make bench`; issue 23 item 2):
# RSS of a real rlproxy process after
#   - 100 sliding-log limiters with 512-byte names, SHARDS 1024 and 8
#     limits (7 LIMITs), each acquired once: target <= 100 MB;
#   - MEM_NAMES (300000) ordinary limiters (RL.SETRATE name 100 1s), each
#     acquired once: target <= 300 MB;
# each on a fresh redis-server and rlproxy. Commands go in with
# redis-cli --pipe. Prints one line per case; exits non-zero when a
# target is missed. MEM_RLPROXY: a prebuilt rlproxy to measure instead.
set -euo pipefail
cd "$(dirname "$0")/.."

NAMES=${MEM_NAMES:-300000}
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
say() { printf '%s\n' "$*" >&2; }

free_port() {
	local port
	for _ in $(seq 100); do
		port=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	say "memory: no free port found"
	exit 1
}
wait_ready() {
	for _ in $(seq 100); do
		[ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return
		sleep 0.1
	done
	say "memory: nothing answers on 127.0.0.1:$1"
	exit 1
}
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

if [ -n "${MEM_RLPROXY:-}" ]; then
	cp "$MEM_RLPROXY" "$work/rlproxy"
else
	$GO build -o "$work/rlproxy" ./cmd/rlproxy
fi

# run NAME TARGET_MB GENERATOR: a fresh redis-server and rlproxy, the
# generator's commands piped in, then the proxy's RSS.
failed=0
run() {
	local name=$1 target=$2 gen=$3 rport pport ppid
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
	local before
	before=$(rss_mb "$ppid")
	python3 - "$gen" "$NAMES" >"$work/cmds" <<'PY'
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
	redis-cli -p "$pport" --pipe <"$work/cmds" >"$work/pipe.out" 2>&1 || { cat "$work/pipe.out" >&2; exit 1; }
	grep -q 'errors: 0' "$work/pipe.out" || { say "memory: $name: errors"; cat "$work/pipe.out" >&2; failed=1; }
	local after
	after=$(rss_mb "$ppid")
	local verdict=ok
	awk -v a="$after" -v t="$target" 'BEGIN { exit !(a > t) }' && { verdict="OVER the $target MB target"; failed=1; }
	printf 'memory: %-44s rlproxy RSS %6s MB before, %6s MB after (target <= %s MB): %s\n' "$name" "$before" "$after" "$target" "$verdict"
	kill "$ppid"
	wait "$ppid" 2>/dev/null || true
}

run "100 limiters: 512-byte names, SHARDS 1024, 8 limits" 100 heavy
run "$NAMES ordinary limiters" 300 ordinary
exit $failed
