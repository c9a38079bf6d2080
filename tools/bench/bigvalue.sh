#!/usr/bin/env bash
# Peak RSS of rlproxy for one big SET and GET through the gateway (issue
# 30), this tree's build and optionally another side by side: BIG_OLD (a
# prebuilt rlproxy, e.g. main before a change), in interleaved rounds
# (BIG_ROUNDS, 5), each on a fresh rlproxy process over one redis-server.
# The value (BIG_MB, 100) goes in with redis-cli -x. Prints each round
# and the medians: growth of VmHWM over the RSS before the command.
set -euo pipefail
cd "$(dirname "$0")/../.."

MB=${BIG_MB:-100}
ROUNDS=${BIG_ROUNDS:-5}
GO=${GO:-go}
work=$(mktemp -d "${TMPDIR:-/tmp}/bigvalue.XXXXXX")
pids=()
cgroup=
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
me=bigvalue
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh

$GO build -o "$work/new" ./cmd/rlproxy
builds=(new)
if [ -n "${BIG_OLD:-}" ]; then
	cp "$BIG_OLD" "$work/old"
	builds=(old new)
fi
head -c $((MB << 20)) /dev/zero | tr '\0' v >"$work/value"
start_redis

kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
# peak PID CMD...: runs CMD and prints how far VmHWM rose over the RSS before, in MB.
peak() {
	local pid=$1 base
	shift
	echo 5 >"/proc/$pid/clear_refs"
	base=$(kb "$pid" VmRSS)
	"$@" >/dev/null
	echo $((($(kb "$pid" VmHWM) - base) / 1024))
}
for round in $(seq "$ROUNDS"); do
	for b in "${builds[@]}"; do
		port=$(free_port)
		"$work/$b" --listen "127.0.0.1:$port" --backend "redis://127.0.0.1:$REDIS_PORT" --passthrough \
			--log-level warn 2>>"$work/$b.log" &
		pid=$!
		pids+=("$pid")
		wait_ready "$port"
		set=$(peak "$pid" redis-cli -p "$port" -x SET big <"$work/value")
		get=$(peak "$pid" redis-cli -p "$port" --raw GET big)
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		echo "round $round $b: a $MB MB SET +$set MB, GET +$get MB"
	done
done | tee "$work/rounds"
for b in "${builds[@]}"; do
	for what in SET GET; do
		m=$(awk -v b="$b:" -v w="$what" '$3 == b { for (i = 1; i <= NF; i++) if ($i == w) { v = $(i + 1); sub(/^\+/, "", v); print v } }' "$work/rounds" |
			sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
		echo "median $b: $what of $MB MB: peak RSS +$m MB"
	done
done
