#!/usr/bin/env bash
# redis-suite.sh: Redis's own test suite as rlproxy's gateway yardstick.
# Runs units of redis/redis tests/ in external mode, first against a
# redis-server directly, then through rlproxy (passthrough on) in front of
# the same redis-server, and prints per unit the tests passed each way.
#
#   tools/redis-suite.sh REDIS_SRC [unit...]
#
# REDIS_SRC: a checkout of redis/redis at the tag of the local
# redis-server (`redis-server --version`), holding runtest and tests/.
# Units default to the 13 of the gateway contract. Needs tclsh.
# The harness is run from a copy in which a unit's CONFIG SET of its
# overrides may fail (on both sides) without stopping the unit.
# Tests of commands the gateway contract refuses are skipped on both
# sides; the list, each with its reason, is tools/redis-suite.skip.
# Logs (one per unit and side) stay in $OUT (default a temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: tools/redis-suite.sh REDIS_SRC [unit...]}
shift
units=("$@")
[ ${#units[@]} -gt 0 ] || units=(type/string type/incr type/list type/hash type/set type/zset
	expire keyspace multi pubsub scripting info-command protocol)
GO=${GO:-go}
work=$(mktemp -d "${TMPDIR:-/tmp}/redis-suite.XXXXXX")
OUT=${OUT:-$work/logs}
mkdir -p "$OUT"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work/tests" "$work/runtest" "$work/rlproxy"
}
trap cleanup EXIT

me=redis-suite
# shellcheck source=/dev/null
. tools/bench/lib.sh

cp -r "$src/tests" "$src/runtest" "$work/"
# A unit's overrides: a refused CONFIG SET is tolerated (either side).
sed -i 's/^\(\s*\)r config set \$param \$val$/\1catch {r config set $param $val}/' \
	"$work/tests/support/server.tcl"
"$GO" build -o "$work/rlproxy" ./cmd/rlproxy
# The harness's skip file: the test names of tools/redis-suite.skip.
grep -v '^#' tools/redis-suite.skip | awk -F' [|] ' 'NF >= 3 {print $2}' >"$work/skip"

# redis_for_unit: a fresh Redis, with the settings of the suite's own servers that matter.
redis_for_unit() {
	start_redis --enable-debug-command yes --enable-protected-configs yes \
		--enable-module-command yes --notify-keyspace-events KEA --latency-monitor-threshold 1
}

# run_unit NAME PORT LOG: one unit in external mode; prints "ok err
# skipped". The harness's own ports start at a free one, so that runs at
# once do not collide.
run_unit() {
	(cd "$work" && TERM=dumb timeout 1800 tclsh tests/test_helper.tcl --host 127.0.0.1 --port "$2" \
		--single "unit/$1" --tags -needs:repl --skipfile "$work/skip" --timeout 300 --dont-clean \
		--baseport "$(free_port)" >"$3" 2>&1) || true
	printf '%s %s %s\n' "$(grep -c '^\[ok\]' "$3" || true)" \
		"$(grep -c '^\[err\]\|^\[exception\]' "$3" || true)" "$(grep -c '^\[skip\]' "$3" || true)"
}

# stop_redis: ends the unit's Redis (noting if it died on its own).
stop_redis() {
	kill -0 "$REDIS_PID" 2>/dev/null || say "$1: redis-server died (see $work/redis-$REDIS_PORT.log)"
	kill "$REDIS_PID" 2>/dev/null || true
	wait "$REDIS_PID" 2>/dev/null || true
}

printf '%-14s %14s %14s %8s\n' unit "passed direct" "via rlproxy" skipped
total_d=0 total_p=0 total_s=0
for u in "${units[@]}"; do
	log=${u//\//-}
	# Each side gets a fresh Redis: a unit may leave settings changed.
	redis_for_unit
	read -r okd _ skd < <(run_unit "$u" "$REDIS_PORT" "$OUT/$log.direct.log")
	stop_redis "$u"
	redis_for_unit
	GW_PORT=$(free_port)
	# passthrough_timeout 60 s: some tests run
	# scripts for seconds, and the machine may be slow (the harness waits
	# 300 s per test: a unit of 10,000 round trips took over 60 s here).
	"$work/rlproxy" --listen "127.0.0.1:$GW_PORT" --backend "redis://127.0.0.1:$REDIS_PORT" \
		--passthrough --passthrough-timeout 60s --log-level warn 2>"$OUT/$log.rlproxy-stderr.log" &
	gw=$!
	pids+=($gw)
	wait_ready "$GW_PORT"
	read -r okp _ skp < <(run_unit "$u" "$GW_PORT" "$OUT/$log.rlproxy.log")
	kill "$gw" 2>/dev/null || true
	wait "$gw" 2>/dev/null || true
	stop_redis "$u"
	# Skipped: as counted through rlproxy (the same list on both sides;
	# a unit cut short skips fewer).
	[ "$skd" = "$skp" ] || say "$u: skipped $skd direct, $skp through rlproxy"
	printf '%-14s %14d %14d %8d\n' "$u" "$okd" "$okp" "$skp"
	total_d=$((total_d + okd)) total_p=$((total_p + okp)) total_s=$((total_s + skp))
done
printf '%-14s %14d %14d %8d\n' total "$total_d" "$total_p" "$total_s"
say "logs: $OUT"
