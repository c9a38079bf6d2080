#!/usr/bin/env bash
# peer-bench.sh: rlproxy's gateway against a real peer, twemproxy (Debian's
# nutcracker), and Redis direct, one Redis behind both. redis-benchmark
# GET and SET, 50 connections unpipelined (p1) and pipelined x16 (p16),
# and one connection (light: GET p50 latency). Rounds interleave the
# three targets; the table gives the medians and rlproxy / twemproxy.
#
# Needs redis-server, redis-benchmark and nutcracker. ROUNDS (default 3)
# and REQUESTS (default 100000 per test; light: a tenth) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-100000}
work=$(mktemp -d "${TMPDIR:-/tmp}/peerbench.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

me=peer-bench
# shellcheck source=/dev/null
. tools/bench/lib.sh

"$GO" build -o "$work/rlproxy" ./cmd/rlproxy
start_redis
GW_PORT=$(free_port)
"$work/rlproxy" --listen "127.0.0.1:$GW_PORT" --backend "redis://127.0.0.1:$REDIS_PORT" --passthrough \
	--log-level warn 2>"$work/rlproxy.log" &
pids+=($!)
TW_PORT=$(free_port)
cat >"$work/twemproxy.yml" <<YML
one:
  listen: 127.0.0.1:$TW_PORT
  redis: true
  servers:
    - 127.0.0.1:$REDIS_PORT:1
YML
nutcracker -c "$work/twemproxy.yml" -o "$work/twemproxy.log" &
pids+=($!)
wait_ready "$GW_PORT"
# twemproxy answers no PING of its own: wait for a forwarded one.
for _ in $(seq 100); do
	[ "$(redis-cli -p "$TW_PORT" ping 2>/dev/null)" = PONG ] && break
	sleep 0.1
done

# bench PORT NAME: one round of every test on one target, as
# "name test value" lines.
bench() {
	local port=$1 name=$2 p
	for p in 1 16; do
		redis-benchmark -p "$port" -c 50 -n "$REQUESTS" -P "$p" -t get,set --csv 2>/dev/null |
			awk -F'"' -v n="$name" -v p="$p" '$2=="GET"||$2=="SET" {print n, $2 "-p" p, $4}'
	done
	redis-benchmark -p "$port" -c 1 -n $((REQUESTS / 10)) -t get --csv 2>/dev/null |
		awk -F'"' -v n="$name" '$2=="GET" {print n, "light-p50-ms", $10}'
}

for r in $(seq "$ROUNDS"); do
	say "round $r of $ROUNDS"
	bench "$REDIS_PORT" direct
	bench "$TW_PORT" twemproxy
	bench "$GW_PORT" rlproxy
done >"$work/results"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
printf '%-14s %12s %12s %12s %18s\n' test direct twemproxy rlproxy "rlproxy/twemproxy"
for t in GET-p1 SET-p1 GET-p16 SET-p16 light-p50-ms; do
	d=$(awk -v t="$t" '$1=="direct" && $2==t {print $3}' "$work/results" | median)
	w=$(awk -v t="$t" '$1=="twemproxy" && $2==t {print $3}' "$work/results" | median)
	g=$(awk -v t="$t" '$1=="rlproxy" && $2==t {print $3}' "$work/results" | median)
	printf '%-14s %12s %12s %12s %18s\n' "$t" "$d" "$w" "$g" "$(awk -v g="$g" -v w="$w" 'BEGIN {if (w > 0) printf "%.2f", g / w; else printf "-"}')"
done
