#!/usr/bin/env bash
# Per-user decisions when Redis is the scarce resource: bench.sh's
# capped-policy rows alone, with an optional earlier build side by side.
#
# One redis-server capped at 10% of a core (cap_cpu, tools/bench/lib.sh), a
# policy over 10,000 names, 50 connections, each request a random name;
# pipelines of 1 and 16. Each round runs direct EVALSHA (rlbench's
# minimal GCRA on per-name keys), this tree's rlproxy and, when
# BENCH_BEFORE names a binary, that rlproxy: interleaved, on the same
# Redis. Prints per row the median throughput, its ratio to direct, and
# Redis CPU µs per decision. Knobs: BENCH_ROUNDS (3), BENCH_SECONDS (4),
# BENCH_BEFORE (an rlproxy binary), BENCH_OUT (bench-results),
# BENCH_RATE and BENCH_INTERVAL (each name's limit, for direct and the
# policy alike: 1000000000 per 1s by default, so a name's state is
# spent almost at once and made again at its next request; 1000 per 1h
# keeps every name's state, as real per-user limits do).
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${BENCH_ROUNDS:-3}
SECS=${BENCH_SECONDS:-4}
RATE=${BENCH_RATE:-1000000000}
INTERVAL=${BENCH_INTERVAL:-1s}
GO=${GO:-go}
OUT=${BENCH_OUT:-bench-results}/per-user-$(date +%Y%m%d-%H%M%S)
work=$(mktemp -d "${TMPDIR:-/tmp}/rlbench.XXXXXX")
pids=()
cgroup=
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	[ -z "$cgroup" ] || rmdir "$cgroup" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
me=bench-per-user
# shellcheck source=tools/bench/lib.sh
. tools/bench/lib.sh

mkdir -p "$OUT"
$GO build -o "$work/after" ./cmd/rlproxy
(cd tools && $GO build -o "$work/rlbench" ./rlbench)
modes=(direct after)
if [ -n "${BENCH_BEFORE:-}" ]; then
	cp "$BENCH_BEFORE" "$work/before"
	modes+=(before)
fi

start_redis
R=$REDIS_PORT
cap_cpu "$REDIS_PID" || exit 1
declare -A port pid
for m in "${modes[@]}"; do
	[ "$m" = direct ] && continue
	port[$m]=$(free_port)
	"$work/$m" --listen "127.0.0.1:${port[$m]}" --backend "redis://127.0.0.1:$R" --log-level warn \
		2>"$work/$m.log" &
	pid[$m]=$!
	pids+=($!)
	wait_ready "${port[$m]}"
done

say "$me: $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg); Redis capped at 10% of a core; each name $RATE per $INTERVAL"
for p in 1 16; do
	for round in $(seq "$ROUNDS"); do
		for m in "${modes[@]}"; do
			name=capped-policy-p$p-$m
			args=(--addr "127.0.0.1:$R" --mode direct)
			if [ "$m" != direct ]; then
				redis-cli -p "${port[$m]}" RL.POLICY SET "bench:$name:*" "$RATE" "$INTERVAL" >/dev/null
				args=(--addr "127.0.0.1:${port[$m]}" --mode rlproxy --stats-proxy "127.0.0.1:${port[$m]}" --proxy-pid "${pid[$m]}")
			fi
			"$work/rlbench" "${args[@]}" --stats-redis "127.0.0.1:$R" --scenario "$name" --round "$round" \
				--key-prefix "bench:$name:" --duration "${SECS}s" --conns 50 --pipeline "$p" --keys 10000 \
				--rate "$RATE" --interval "$INTERVAL" --setup=false --out "$OUT/$name-r$round.json" >/dev/null
		done
	done
done

python3 - "$OUT" "${modes[@]}" <<'PY'
import glob, json, statistics as st, sys
out, modes = sys.argv[1], sys.argv[2:]
print("row                   mode     ops/s    x direct  Redis us/decision  Redis busy  proxy us/decision  names/call  (medians of rounds)")
# Redis busy: its CPU per second of run (the cap is 0.10): well under the
# cap, something else (the proxy's CPU, the load) held the row back.
for p in (1, 16):
    med = {}
    for m in modes:
        runs = [json.load(open(f)) for f in sorted(glob.glob("%s/capped-policy-p%d-%s-r*.json" % (out, p, m)))]
        med[m] = [st.median(f(r) for r in runs) for f in (
            lambda r: r["ops_per_sec"],
            lambda r: r.get("redis_cpu_per_request_us", 0),
            lambda r: r["ops_per_sec"] * r.get("redis_cpu_per_request_us", 0) / 1e6,
            lambda r: r.get("proxy_cpu_per_request_us", 0),
            lambda r: 1 / r["backend_calls_per_request"] if r.get("backend_calls_per_request") else 1)]
    for m in modes:
        ops, us, busy, proxy, batch = med[m]
        print("capped-policy-p%-5d %-8s %8.0f %8.2f %12.1f %14.3f %14.1f %12.1f" % (p, m, ops, ops / med["direct"][0], us, busy, proxy, batch))
PY
say "$me: runs in $OUT"
