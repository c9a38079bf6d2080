#!/usr/bin/env bash
# The performance suite (`make bench`): rlproxy against the direct-to-Redis
# baseline, side by side in one run.
#
# It builds rlproxy and rlbench, starts its own redis-server(s) and rlproxy
# on free loopback ports (nothing persisted), runs each scenario as
# interleaved rounds (direct, rlproxy, direct, rlproxy, ...), and lets
# `rlbench report` take the medians and check every target of the
# performance issue. Results go to bench-results/<time>/ (one JSON per run,
# summary.json, report.txt); the throughput-vs-clients chart goes to
# docs/bench-throughput.svg. Then the Go micro-benchmarks of the hot paths
# run (go test -bench, allocations reported).
#
# Knobs (environment): BENCH_ROUNDS (3), BENCH_SECONDS (4, per run),
# BENCH_DENY_RATE (1000 permits/s), BENCH_NODES (4, for the scaling run),
# BENCH_ROWS (all, or some of "hot policy capped cluster probe clients scale":
# the rlbench scenario groups to run; the report marks the others not
# run), BENCH_GO (1: also run the Go benchmarks), BENCH_MEMORY (1: also
# tools/bench/memory.sh: the proxy's RSS per limiter, Redis's memory per policy
# name), BENCH_BIG (1: also the gateway's big values: peak RSS of a real
# rlproxy for 200 MB replies to clients that never read, a 100 MB SET+GET),
# BENCH_OUT (bench-results),
# BENCH_RLS_REF (envoyproxy/ratelimit's binary: also run tools/rlsside bench),
# BENCH_RLPROXY (a prebuilt rlproxy binary to measure instead of this
# tree's: the same suite on an older version, for before/after tables).
# The Redis-bound runs (capped-*) need a writable cgroup cpu controller
# (root on Linux); without one they are skipped with a line saying so.
# Everything started here is stopped on exit, also on Ctrl-C or failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${BENCH_ROUNDS:-3}
SECS=${BENCH_SECONDS:-4}
DENY_RATE=${BENCH_DENY_RATE:-1000}
NODES=${BENCH_NODES:-4}
GO=${GO:-go}
OUT=${BENCH_OUT:-bench-results}/$(date +%Y%m%d-%H%M%S)
CHART=docs/bench-throughput.svg

work=$(mktemp -d "${TMPDIR:-/tmp}/rlbench.XXXXXX")
pids=()
cgroup= # the CPU-capped cgroup of the Redis-bound runs, once made
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	[ -z "$cgroup" ] || rmdir "$cgroup" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

me=bench
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh

# start_proxy PORT... [-- FLAG...]: starts rlproxy over those Redis ports
# (with extra flags after --), sets PROXY_PORT and PROXY_PID.
start_proxy() {
	local args=() port
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		args+=(--backend "redis://127.0.0.1:$1")
		shift
	done
	[ $# -eq 0 ] || { shift; args+=("$@"); }
	PROXY_PORT=$(free_port)
	"$work/rlproxy" --listen "127.0.0.1:$PROXY_PORT" "${args[@]}" --log-level warn \
		2>"$work/rlproxy-$PROXY_PORT.log" &
	PROXY_PID=$!
	pids+=("$PROXY_PID")
	wait_ready "$PROXY_PORT"
}

say "bench: building rlproxy and rlbench"
if [ -n "${BENCH_RLPROXY:-}" ]; then
	cp "$BENCH_RLPROXY" "$work/rlproxy"
	say "bench: measuring $BENCH_RLPROXY"
else
	$GO build -o "$work/rlproxy" ./cmd/rlproxy
fi
(cd tools && $GO build -o "$work/rlbench" ./rlbench)
mkdir -p "$OUT" "$(dirname "$CHART")"

load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
say "bench: $(nproc) CPUs, load average $load; rlbench, redis-server and rlproxy share these CPUs"

start_redis
R1=$REDIS_PORT
start_proxy "$R1"
P1=$PROXY_PORT
P1_PID=$PROXY_PID

# rows GROUP: whether BENCH_ROWS asks for that group of scenarios.
rows() {
	case " ${BENCH_ROWS:-all} " in *" all "* | *" $1 "*) return 0 ;; esac
	return 1
}

# bench NAME ROUND MODE [rlbench flags...]: one run, its JSON in $OUT.
bench() {
	local name=$1 round=$2 mode=$3
	shift 3
	# BR, BP, BP_PID: the Redis and rlproxy to use (default: the first pair);
	# BSTATS: the Redis servers to measure (default: BR); BDIRECT: extra
	# rlbench flags of direct runs.
	local r=${BR:-$R1} p=${BP:-$P1} ppid=${BP_PID:-$P1_PID}
	local addr=127.0.0.1:$r stats=(--stats-redis "${BSTATS:-127.0.0.1:$r}") extra=()
	if [ "$mode" = rlproxy ]; then
		addr=127.0.0.1:$p
		stats+=(--stats-proxy "127.0.0.1:$p" --proxy-pid "$ppid")
	else
		read -ra extra <<<"${BDIRECT:-}"
	fi
	"$work/rlbench" --mode "$mode" --addr "$addr" "${stats[@]}" "${extra[@]}" \
		--scenario "$name" --round "$round" --key-prefix "bench:$name:" \
		--duration "${SECS}s" --out "$OUT/$name-$mode-r$round.json" "$@" |
		sed "s/^/  [$name r$round] /" >&2
}

# interleaved NAME [rlbench flags...]: ROUNDS rounds of direct then rlproxy.
interleaved() {
	local name=$1 round
	shift
	say "bench: $name ($ROUNDS rounds x direct, rlproxy; ${SECS}s each): $*"
	for round in $(seq "$ROUNDS"); do
		bench "$name" "$round" direct "$@"
		bench "$name" "$round" rlproxy "$@"
	done
}

if rows hot; then
	interleaved hot-p16 --conns 50 --pipeline 16
	interleaved hot-p1 --conns 50 --pipeline 1
	# The same connections sending PING, which rlproxy answers itself: the
	# ceiling its connection handling sets for hot-p1 (Redis's PING alongside).
	interleaved ping-p1 --conns 50 --pipeline 1 --ping
	interleaved deny-p16 --conns 50 --pipeline 16 --rate "$DENY_RATE"
	interleaved deny-p1 --conns 50 --pipeline 1 --rate "$DENY_RATE"
	interleaved light --conns 1 --pipeline 1
fi

# One rule, many names: a policy over 10,000 names, each request a random
# one, against direct EVALSHA of the minimal GCRA on per-name keys.
if rows policy; then
	for p in 1 16; do
		redis-cli -p "$P1" RL.POLICY SET "bench:policy-p$p:*" 1000000000 1s >/dev/null
		interleaved "policy-p$p" --conns 50 --pipeline "$p" --keys 10000 --setup=false
	done
	# The same over a million names (each request almost surely a name not
	# seen in the same script call).
	redis-cli -p "$P1" RL.POLICY SET "bench:policy-1m-p16:*" 1000000000 1s >/dev/null
	interleaved policy-1m-p16 --conns 50 --pipeline 16 --keys 1000000 --setup=false
fi

# The Redis-bound regime: a redis-server capped at 10% of one core, with
# rlbench and a proxy of its own outside the cap. Redis is the scarce
# resource here, so what counts is how few of its cycles a request takes.
start_redis
CR=$REDIS_PORT
if { rows capped || rows policy; } && cap_cpu "${pids[-1]}"; then
	start_proxy "$CR"
	if rows capped; then
		BR=$CR BP=$PROXY_PORT BP_PID=$PROXY_PID interleaved capped-p1 --conns 50 --pipeline 1
		BR=$CR BP=$PROXY_PORT BP_PID=$PROXY_PID interleaved capped-p16 --conns 50 --pipeline 16
	fi
	if rows policy; then
		for p in 1 16; do
			redis-cli -p "$PROXY_PORT" RL.POLICY SET "bench:capped-policy-p$p:*" 1000000000 1s >/dev/null
			BR=$CR BP=$PROXY_PORT BP_PID=$PROXY_PID interleaved "capped-policy-p$p" --conns 50 --pipeline "$p" --keys 10000 --setup=false
		done
	fi
fi

# One policy on a Redis Cluster of 3 masters: the names of each master
# are decided together (direct: EVALSHA sent to each key's master).
if rows cluster; then
	cluster_addrs=()
	for i in 1 2 3; do
		start_redis --cluster-enabled yes --cluster-config-file "nodes-$i.conf"
		cluster_addrs+=("127.0.0.1:$REDIS_PORT")
	done
	redis-cli --cluster create "${cluster_addrs[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1
	for a in "${cluster_addrs[@]}"; do
		for _ in $(seq 100); do
			[ "$(redis-cli -p "${a##*:}" cluster info | tr -d '\r' | grep cluster_state)" = cluster_state:ok ] && break
			sleep 0.1
		done
	done
	start_proxy -- --cluster "redis://${cluster_addrs[0]}"
	stats=$(IFS=,; echo "${cluster_addrs[*]}")
	for p in 1 16; do
		redis-cli -p "$PROXY_PORT" RL.POLICY SET "bench:cluster-policy-p$p:*" 1000000000 1s >/dev/null
		BR=${cluster_addrs[0]##*:} BSTATS=$stats BDIRECT=--cluster BP=$PROXY_PORT BP_PID=$PROXY_PID \
			interleaved "cluster-policy-p$p" --conns 50 --pipeline "$p" --keys 10000 --setup=false
	done
fi

# Script calls per denied acquire on SHARDS 4 (max_probes 2, deny cache
# off), one request at a time so nothing is coalesced: at most 1 + 2.
if rows probe; then
	start_proxy "$R1" -- --max-probes 2 --deny-cache=false
	say "bench: probe-deny (1 conn, SHARDS 4, a limiter that denies all; ${SECS}s)"
	for round in $(seq "$ROUNDS"); do
		BP=$PROXY_PORT BP_PID=$PROXY_PID bench probe-deny "$round" rlproxy --conns 1 --pipeline 1 \
			--shards 4 --rate 4 --interval 1h
	done
fi

# Throughput vs clients, for the chart: one round each, pipeline 16.
if rows clients; then
	for conns in 1 10 50 100; do
		say "bench: clients-$conns (direct, rlproxy; 3s each)"
		SECS=3 bench "clients-$conns" 1 direct --conns "$conns" --pipeline 16
		SECS=3 bench "clients-$conns" 1 rlproxy --conns "$conns" --pipeline 16
	done
fi

# Scaling: N sub-limiters over N nodes, through a second rlproxy.
if rows scale; then
	scale_ports=()
	for _ in $(seq "$NODES"); do
		start_redis
		scale_ports+=("$REDIS_PORT")
	done
	start_proxy "${scale_ports[@]}"
	scale_stats=$(printf '127.0.0.1:%s,' "${scale_ports[@]}")
	scale_stats=${scale_stats%,}
	for s in "scale-keys 1000" "scale-hot 1"; do
		set -- $s
		say "bench: $1 ($NODES shards over $NODES nodes, $2 limiter(s); ${SECS}s)"
		"$work/rlbench" --mode rlproxy --addr "127.0.0.1:$PROXY_PORT" --stats-redis "$scale_stats" \
			--stats-proxy "127.0.0.1:$PROXY_PORT" --proxy-pid "$PROXY_PID" \
			--scenario "$1" --round 1 --key-prefix "bench:$1:" --duration "${SECS}s" \
			--conns 50 --pipeline 16 --keys "$2" --shards "$NODES" --out "$OUT/$1-rlproxy-r1.json" |
			sed "s/^/  [$1] /" >&2
	done
fi

"$work/rlbench" report "$OUT" | tee "$OUT/report.txt"
if rows clients; then
	(cd tools && $GO build -o "$work/chart" ./bench)
	"$work/chart" -in "$OUT/summary.json" -out "$CHART"
	say "bench: results in $OUT/, chart in $CHART"
else
	say "bench: results in $OUT/"
fi

if [ "${BENCH_GO:-1}" = 1 ]; then
	say "bench: Go benchmarks of the hot paths (go test -bench, allocations reported)"
	$GO test -run='^$' -bench=. -benchmem -benchtime=200ms ./server ./commands ./limiter ./backend ./sharding ./ratelimit |
		tee "$OUT/go-bench.txt"
	say "bench: sharding's under-admission under saturating load (TestShardUnderAdmission, about 20 s)"
	RLPROXY_MEASURE=1 $GO test -count=1 -run='^TestShardUnderAdmission$' -v ./internal/proxy |
		grep -v '^redis: ' | tee "$OUT/under-admission.txt"
fi

# rlproxy's rate limit service against envoyproxy/ratelimit on one Redis,
# the same gRPC load, beside a gRPC server that answers OK without Redis
# (tools/rlsside bench prints its own table). Only when BENCH_RLS_REF names
# envoyproxy/ratelimit's binary: the Go module proxy refuses that module,
# so build it from its repository (git clone, then in it
# `go build -o ratelimit ./src/service_cmd`; measured at f2fb157).
if [ -n "${BENCH_RLS_REF:-}" ]; then
	say "bench: rate limit service vs envoyproxy/ratelimit (tools/rlsside bench)"
	(cd tools && $GO build -o "$work/rlsside" ./rlsside)
	# h2load (Debian nghttp2-client), when installed, loads the hot
	# descriptor too: a load tool that costs a quarter of the Go client's CPU.
	h2=""; command -v h2load >/dev/null && h2="-h2load"
	"$work/rlsside" bench -ref "$BENCH_RLS_REF" -rlproxy "$work/rlproxy" -rounds "$((ROUNDS * 2 + 1))" $h2 |
		tee "$OUT/rls.txt"
fi

# The gateway (passthrough) against Redis direct, with redis-benchmark's
# GET and SET as the load (tools/bench/gateway-bench.sh prints its own table).
if [ "${BENCH_GATEWAY:-1}" = 1 ]; then
	say "bench: gateway passthrough vs direct (redis-benchmark GET/SET)"
	GO=$GO ROUNDS="$ROUNDS" bash tools/bench/gateway-bench.sh | tee "$OUT/gateway.txt"
fi

if [ "${BENCH_MEMORY:-1}" = 1 ]; then
	say "bench: the proxy's memory per limiter and per policy name (tools/bench/memory.sh; about 4 minutes)"
	MEM_RLPROXY="$work/rlproxy" bash tools/bench/memory.sh | tee "$OUT/memory.txt"
fi

# Big values through the gateway (issue 30): the peak RSS of a real rlproxy
# while five clients that never read GET a 200 MB value, and while one
# client SETs and GETs 100 MB (cmd/rlproxy/size_linux_test.go).
if [ "${BENCH_BIG:-1}" = 1 ]; then
	say "bench: big values through the gateway (200 MB replies nobody reads, a 100 MB SET+GET; about 2 minutes)"
	RLPROXY_BIG_REPLY_MB=200 RLPROXY_BIG_VALUE_MB=100 $GO test -count=1 -run='^TestBinaryGateway(NonReadingClients|BigValue)$' -v ./cmd/rlproxy |
		grep -E '^(--- |ok|FAIL|\s+size_linux_test)' | tee "$OUT/big-values.txt"
fi
