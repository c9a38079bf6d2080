# Shared by the bench scripts (bench.sh, gateway-bench.sh, memory.sh):
# sourced after they set `work` (a scratch folder), `pids` (processes to
# stop on exit) and `cgroup` (the cgroup cap_cpu made, for cleanup), and
# optionally `me` (the prefix of messages).

say() { printf '%s\n' "$*" >&2; }

# free_port prints a loopback port nothing listens on (checked by connecting).
free_port() {
	local port
	for _ in $(seq 100); do
		# Below Linux's ephemeral range (32768+), where a client
		# connection's local port could make a listener fail to bind.
		port=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	say "${me:-bench}: no free port found"
	exit 1
}

# wait_ready PORT: until something answers PING there (10 s at most).
wait_ready() {
	for _ in $(seq 100); do
		if [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; then
			return
		fi
		sleep 0.1
	done
	say "${me:-bench}: nothing answers on 127.0.0.1:$1"
	exit 1
}

# start_redis [FLAG...]: starts a redis-server (with those extra flags),
# sets REDIS_PORT and REDIS_PID.
start_redis() {
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize no --dir "$work" --logfile "$work/redis-$REDIS_PORT.log" "$@" &
	REDIS_PID=$!
	pids+=($!)
	wait_ready "$REDIS_PORT"
}

# cap_cpu PID: puts a process in a cgroup that gives it 10% of one core
# (period 10 ms, quota 1 ms): cgroup v1's cpu controller, or v2's cpu.max.
# Returns non-zero, having said why, when neither is writable.
cap_cpu() {
	local v1=/sys/fs/cgroup/cpu v2=/sys/fs/cgroup
	if [ -w "$v1" ] && [ -e "$v1/cpu.cfs_quota_us" ]; then
		cgroup=$v1/${me:-bench}-$$
		mkdir -p "$cgroup" && echo 10000 >"$cgroup/cpu.cfs_period_us" &&
			echo 1000 >"$cgroup/cpu.cfs_quota_us" && echo "$1" >"$cgroup/tasks" && return 0
	elif [ -w "$v2" ] && grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null; then
		cgroup=$v2/${me:-bench}-$$
		mkdir -p "$cgroup" && echo "1000 10000" >"$cgroup/cpu.max" &&
			echo "$1" >"$cgroup/cgroup.procs" && return 0
	fi
	say "${me:-bench}: skipping the Redis-bound (capped) runs: no writable cgroup cpu controller (v1 $v1 or v2 $v2 cpu.max); run as root on Linux"
	return 1
}

# nutcracker_conf LISTEN_PORT REDIS_PORT: writes $work/nutcracker.yml, a
# twemproxy pool with one server connection (as rlproxy's shared one).
nutcracker_conf() {
	cat >"$work/nutcracker.yml" <<-EOF
		bench:
		  listen: 127.0.0.1:$1
		  redis: true
		  hash: fnv1a_64
		  distribution: ketama
		  auto_eject_hosts: false
		  preconnect: true
		  server_connections: 1
		  servers:
		   - 127.0.0.1:$2:1
	EOF
}
