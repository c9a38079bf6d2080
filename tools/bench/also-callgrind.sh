#!/usr/bin/env bash
# Instructions per call of an ALSO of 1-3 names against a lone acquire
# (limiter's TestAlsoInstructions): a redis-server of its own under
# valgrind's callgrind, which counts what the server runs, so the ratio
# holds on a busy machine where time does not. Needs valgrind.
# usage: also-callgrind.sh [GIT_REV]   (GIT_REV: measure limiter/ at that rev too, first)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
run() { # $1: a tree holding the module
  local dir port pid
  dir=$(mktemp -d)
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  (cd "$dir" && exec valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1) &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  (cd "$1" && RLPROXY_CALLGRIND_ADDR=127.0.0.1:$port RLPROXY_CALLGRIND_PID=$pid RLPROXY_CALLGRIND_DIR=$dir \
    go test ./limiter -count=1 -run '^TestAlsoInstructions$' -v 2>&1 | grep -E 'instructions per call|FAIL|panic' || true)
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
if [ $# -gt 0 ]; then
  before=$(mktemp -d)
  git -C "$root" archive "$1" | tar -x -C "$before"
  cp "$root/limiter/also_instr_test.go" "$before/limiter/"
  echo "== $1"
  run "$before"
  rm -rf "$before"
  echo "== working tree"
fi
run "$root"
