#!/usr/bin/env bash
# gateway-bench.sh: rlproxy's gateway (passthrough) against Redis direct,
# with redis-benchmark's own GET and SET tests as the load. Rounds
# alternate direct and gateway; the table gives the medians.
#
#   scenarios: 50 connections unpipelined (p1) and x pipeline 16 (p16) on
#   an uncapped Redis; the same on a Redis capped at 10% of one core
#   (capped-*: Redis is the scarce resource, so what counts is its CPU per
#   command, shown too); one connection (light: GET p50 latency); four
#   connections unpipelined (c4: few clients, where queuing commands
#   behind a round trip buys little batching).
#
#   peer: twemproxy (Debian's nutcracker, when installed) in front of the
#   same Redis, in the same rounds: the table adds its throughput and p50
#   and rlproxy's ratio to it.
#
# Needs redis-server and redis-benchmark; the capped runs need a writable
# cgroup cpu controller (root). ROUNDS (default 3) and REQUESTS (default
# 200000 per test; light and c4: a tenth) tune it.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-200000}
work=$(mktemp -d "${TMPDIR:-/tmp}/gwbench.XXXXXX")
pids=()
cgroup=""
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -z "$cgroup" ] || rmdir "$cgroup" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

me=gateway-bench
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh

start_gateway() {
	GW_PORT=$(free_port)
	"$work/rlproxy" --listen "127.0.0.1:$GW_PORT" --backend "redis://127.0.0.1:$1" --passthrough \
		--log-level warn 2>"$work/rlproxy-$GW_PORT.log" &
	pids+=($!)
	proxy_pid[$GW_PORT]=$!
	wait_ready "$GW_PORT"
}

# start_twemproxy REDIS_PORT: nutcracker with one pool in front of that
# Redis (one server connection, as rlproxy's shared one); sets TW_PORT.
start_twemproxy() {
	TW_PORT=$(free_port)
	nutcracker_conf "$TW_PORT" "$1"
	nutcracker -c "$work/nutcracker.yml" -s "$(free_port)" -a 127.0.0.1 -o "$work/nutcracker.log" &
	pids+=($!)
	proxy_pid[$TW_PORT]=$!
	wait_ready "$TW_PORT"
}

# proxy_pid: the proxies' process ids, by port (for proxy_cpu).
declare -A proxy_pid

# proxy_cpu PORT: the CPU seconds so far (user + sys) of the proxy on that
# port; 0 for Redis itself.
proxy_cpu() {
	local pid=${proxy_pid[$1]:-}
	if [ -z "$pid" ]; then echo 0; else awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$pid/stat"; fi
}

# redis_cpu PORT: Redis's CPU seconds so far (user + sys).
redis_cpu() {
	redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}

# run NAME ROUND MODE PORT REDIS_PORT [redis-benchmark flags]: one run;
# appends "name mode test round rps p50_ms redis_us_per_request
# proxy_us_per_request" lines to results.
run() {
	local name=$1 round=$2 mode=$3 port=$4 rport=$5
	shift 5
	local before after pbefore pafter
	before=$(redis_cpu "$rport") pbefore=$(proxy_cpu "$port")
	local n=$REQUESTS
	case $name in light | c4) n=$((REQUESTS / 10)) ;; esac
	redis-benchmark -h 127.0.0.1 -p "$port" -n "$n" --csv "$@" >"$work/out.csv"
	after=$(redis_cpu "$rport") pafter=$(proxy_cpu "$port")
	local tests
	tests=$(tail -n +2 "$work/out.csv" | wc -l)
	tail -n +2 "$work/out.csv" | tr -d '"' | awk -F, -v n="$name" -v m="$mode" -v r="$round" \
		-v cpu="$(awk -v a="$after" -v b="$before" 'BEGIN {print a - b}')" -v req="$n" -v t="$tests" \
		-v pcpu="$(awk -v a="$pafter" -v b="$pbefore" 'BEGIN {print a - b}')" \
		'{printf "%s %s %s %d %.0f %.3f %.2f %.2f\n", n, m, $1, r, $2, $5, cpu * 1e6 / (req * t), pcpu * 1e6 / (req * t)}' >>"$work/results"
	echo "  [$name r$round] $mode: $(tail -n +2 "$work/out.csv" | tr -d '"' | awk -F, '{printf "%s %.0f/s p50 %.3fms; ", $1, $2, $5}')" >&2
}

$GO build -o "$work/rlproxy" ./cmd/rlproxy
echo "gateway-bench: $(nproc) CPUs; redis-benchmark, Redis and rlproxy share them; $ROUNDS rounds" >&2

start_redis
R=$REDIS_PORT
start_gateway "$R"
G=$GW_PORT
T=""
if command -v nutcracker >/dev/null; then
	start_twemproxy "$R"
	T=$TW_PORT
else
	say "gateway-bench: no twemproxy (apt-get install nutcracker): no peer columns"
fi
scenarios=("p1:-c 50 -P 1 -t get,set" "p16:-c 50 -P 16 -t get,set" "light:-c 1 -P 1 -t get" "c4:-c 4 -P 1 -t get")
start_redis
CR=$REDIS_PORT
CR_PID=$REDIS_PID
if cap_cpu "$CR_PID"; then
	start_gateway "$CR"
	CG=$GW_PORT
fi
for round in $(seq "$ROUNDS"); do
	for s in "${scenarios[@]}"; do
		name=${s%%:*} flags=${s#*:}
		# shellcheck disable=SC2086
		run "$name" "$round" direct "$R" "$R" $flags
		# shellcheck disable=SC2086
		run "$name" "$round" gateway "$G" "$R" $flags
		# shellcheck disable=SC2086
		[ -z "$T" ] || run "$name" "$round" twemproxy "$T" "$R" $flags
	done
	if [ -n "${CG:-}" ]; then
		for s in "${scenarios[@]:0:2}"; do
			name=capped-${s%%:*} flags=${s#*:}
			# shellcheck disable=SC2086
			run "$name" "$round" direct "$CR" "$CR" $flags
			# shellcheck disable=SC2086
			run "$name" "$round" gateway "$CG" "$CR" $flags
		done
	fi
done

# The medians; gateway/direct and gateway/twemproxy (with the range of
# the rounds' own ratios); the proxies' CPU per request (twemproxy's
# columns are "-" without it).
echo
printf '%-10s %-4s %9s %9s %9s %6s %6s %11s %7s %7s %7s %8s %8s %7s %7s\n' scenario test direct/s gateway/s twemprx/s gw/dir gw/tw "gw/tw range" \
	"p50 dir" "p50 gw" "p50 tw" "Redis us" "(gw)" "gw us" "tw us"
sort -k1,1 -k3,3 "$work/results" | awk '
function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function range(s,   a, n, i, lo, hi) { n = split(s, a, " "); lo = hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }; return sprintf("%.2f-%.2f", lo, hi) }
{ k = $1 " " $3; keys[k] = 1; rps[k, $2] = rps[k, $2] " " $5; p50[k, $2] = p50[k, $2] " " $6; cpu[k, $2] = cpu[k, $2] " " $7
	pcpu[k, $2] = pcpu[k, $2] " " $8; round[k, $2, $4] = $5 }
END { for (k in keys) { split(k, kk, " "); d = median(rps[k, "direct"]); g = median(rps[k, "gateway"])
	t = gt = gr = pt = tu = "-"
	if (rps[k, "twemproxy"] != "") {
		tw = median(rps[k, "twemproxy"]); t = sprintf("%.0f", tw); gt = sprintf("%.2f", g / tw)
		pt = sprintf("%.3f", median(p50[k, "twemproxy"])); tu = sprintf("%.1f", median(pcpu[k, "twemproxy"]))
		r = ""; for (i = 1; (k, "gateway", i) in round; i++) if (round[k, "twemproxy", i] > 0) r = r " " round[k, "gateway", i] / round[k, "twemproxy", i]
		gr = range(r)
	}
	printf "%-10s %-4s %9.0f %9.0f %9s %6.2f %6s %11s %7.3f %7.3f %7s %8.2f %8.2f %7.1f %7s\n", kk[1], kk[2], d, g, t, g / d, gt, gr,
		median(p50[k, "direct"]), median(p50[k, "gateway"]), pt, median(cpu[k, "direct"]), median(cpu[k, "gateway"]), median(pcpu[k, "gateway"]), tu } }' | sort
