#!/usr/bin/env bash
# gwloop-bench.sh: CPU per forwarded command and throughput of the
# gateway's designs side by side, one Redis, redis-benchmark GET and SET
# from 50 unpipelined connections (override with FLAGS), interleaved rounds:
#
#   twemproxy     Debian's nutcracker (one server connection)
#   rlproxy       the gateway (rlproxy --passthrough) as it ships: plain
#                 clients and the shared backend connections served by
#                 its event loop (passthrough_loop, server/loop_linux.go)
#   rlproxy-goroutines  passthrough_loop=false: a goroutine per client and
#                 a reader goroutine per backend connection
#   rlproxy-1p    the default with GOMAXPROCS=1 (twemproxy is one thread
#                 too; Go sets it so in a one-CPU container)
#   loop          tools/gwloop: one locked thread in epoll_wait serving the
#                 client sockets and the backend socket
#   loop-gor      tools/gwloop -backend-goroutine: the loop reads clients,
#                 a goroutine reads the backend and writes the replies
#   loop-raw      tools/gwloop -raw: as loop, its epoll_wait a raw system
#                 call (the thread keeps its P: the runtime's monitor never
#                 sleeps deeply, as with rlproxy's monitor keeper)
#
# CPU per request: the proxy process's utime+stime (/proc/PID/stat) over
# the run divided by the requests. Prints the per-round lines, then the
# medians and ratios to twemproxy. ROUNDS (default 5), REQUESTS (default
# 100000 per test).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-100000}
FLAGS=${FLAGS:--c 50 -P 1}
work=$(mktemp -d "${TMPDIR:-/tmp}/gwloop.XXXXXX")
pids=()
cgroup=""
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
me=gwloop-bench
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh

$GO build -o "$work/rlproxy" ./cmd/rlproxy
(cd tools && $GO build -o "$work/gwloop" ./gwloop)
command -v nutcracker >/dev/null || {
	say "$me: needs twemproxy (apt-get install nutcracker)"
	exit 1
}

declare -A port pid
# start NAME PORT CMD...: runs a proxy, records its pid, waits for PING.
start() {
	local name=$1 p=$2
	shift 2
	"$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	pid[$name]=$! port[$name]=$p
	wait_ready "$p"
}

start_redis
R=$REDIS_PORT
p=$(free_port)
nutcracker_conf "$p" "$R"
start twemproxy "$p" nutcracker -c "$work/nutcracker.yml" -s "$(free_port)" -a 127.0.0.1
gw() { echo "$work/rlproxy --listen 127.0.0.1:$1 --backend redis://127.0.0.1:$R --passthrough --log-level warn"; }
p=$(free_port)
# shellcheck disable=SC2046
start rlproxy "$p" $(gw "$p")
p=$(free_port)
# shellcheck disable=SC2046
start rlproxy-goroutines "$p" $(gw "$p") --passthrough-loop=false
p=$(free_port)
# shellcheck disable=SC2046
start rlproxy-1p "$p" env GOMAXPROCS=1 $(gw "$p")
p=$(free_port)
start loop "$p" "$work/gwloop" -listen "127.0.0.1:$p" -backend "127.0.0.1:$R"
p=$(free_port)
start loop-gor "$p" "$work/gwloop" -listen "127.0.0.1:$p" -backend "127.0.0.1:$R" -backend-goroutine
p=$(free_port)
start loop-raw "$p" "$work/gwloop" -listen "127.0.0.1:$p" -backend "127.0.0.1:$R" -raw

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
say "$me: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds of $REQUESTS requests per test; redis-benchmark $FLAGS"
for round in $(seq "$ROUNDS"); do
	for t in get set; do
		for name in "${!port[@]}"; do
			before=$(cpu "${pid[$name]}")
			# shellcheck disable=SC2086
			rps=$(redis-benchmark -h 127.0.0.1 -p "${port[$name]}" -n "$REQUESTS" $FLAGS -t "$t" --csv |
				tail -n +2 | tr -d '"' | cut -d, -f2)
			after=$(cpu "${pid[$name]}")
			us=$(awk -v a="$after" -v b="$before" -v hz="$hz" -v n="$REQUESTS" 'BEGIN {printf "%.2f", (a - b) / hz * 1e6 / n}')
			echo "$name $t $round $rps $us" | tee -a "$work/results" >&2
		done
	done
done
say "$me: load after $(cut -d' ' -f1-3 /proc/loadavg)"

echo
printf '%-18s %-4s %10s %8s %11s %8s %8s %11s\n' proxy test "req/s" "x tw" "x tw range" "CPU us" "x tw" "x tw range"
awk '
function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function range(s,   a, n, i, lo, hi) { n = split(s, a, " "); lo = hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }; return sprintf("%.2f-%.2f", lo, hi) }
{ k = $1 " " $2; keys[k] = 1; rps[k] = rps[k] " " $4; us[k] = us[k] " " $5; R[$1, $2, $3] = $4; U[$1, $2, $3] = $5; if ($3 > rounds) rounds = $3 }
END { for (k in keys) { split(k, kk, " "); tw = "twemproxy " kk[2]; rr = ru = ""
	for (i = 1; i <= rounds; i++) { rr = rr " " R[kk[1], kk[2], i] / R["twemproxy", kk[2], i]; ru = ru " " U[kk[1], kk[2], i] / U["twemproxy", kk[2], i] }
	printf "%-18s %-4s %10.0f %8.2f %11s %8.2f %8.2f %11s\n", kk[1], kk[2], median(rps[k]), median(rps[k]) / median(rps[tw]), range(rr),
		median(us[k]), median(us[k]) / median(us[tw]), range(ru) } }' "$work/results" | sort -k2,2 -k1,1
