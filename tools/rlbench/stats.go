package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rlproxy/rlproxy/internal/resp"
)

// A snapshot of the counters a run reads at the start and the end of its
// measured window; the report uses their differences.
type snapshot struct {
	redis []redisCounters
	proxy proxyCounters
	self  float64 // rlbench's own CPU seconds
}

// redisCounters are one Redis node's counters (INFO cpu, commandstats).
type redisCounters struct {
	cpu      float64 // used_cpu_sys + used_cpu_user, seconds
	evalsha  int64   // cmdstat_evalsha calls (+ cmdstat_eval calls)
	commands int64   // total_commands_processed
}

// proxyCounters are rlproxy's: CPU from /proc and its INFO limiters section.
type proxyCounters struct {
	cpu                              float64
	granted, denied, deniedFromCache int64
}

// sampler reads counters from the Redis nodes and the rlproxy process a
// run was told about. Its connections are separate from the load's.
type sampler struct {
	redis     []*statConn
	proxy     *statConn // rlproxy's INFO, optional
	proxyPid  int       // 0: no process to read CPU from
	redisAddr []string
}

type statConn struct {
	c  net.Conn
	rr replyReader
}

func dialStat(addr string) (*statConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &statConn{c: c, rr: replyReader{r: bufio.NewReader(c)}}, nil
}

// info runs INFO with the given sections and returns its field:value lines.
func (s *statConn) info(sections ...string) (map[string]string, error) {
	if err := s.c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := s.c.Write(resp.AppendCommand(nil, append([]string{"INFO"}, sections...)...)); err != nil {
		return nil, err
	}
	v, err := s.rr.value()
	if err != nil {
		return nil, err
	}
	text, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("INFO answered %v", v)
	}
	return parseInfo(text), nil
}

func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// commandCalls reads the calls= field of a cmdstat_<name> line.
func commandCalls(info map[string]string, name string) int64 {
	for _, f := range strings.Split(info["cmdstat_"+name], ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func newSampler(redisAddrs []string, proxyAddr string, proxyPid int) (*sampler, error) {
	s := &sampler{proxyPid: proxyPid, redisAddr: redisAddrs}
	for _, a := range redisAddrs {
		c, err := dialStat(a)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("stats connection to %s: %w", a, err)
		}
		s.redis = append(s.redis, c)
	}
	if proxyAddr != "" {
		c, err := dialStat(proxyAddr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("stats connection to %s: %w", proxyAddr, err)
		}
		s.proxy = c
	}
	return s, nil
}

func (s *sampler) close() {
	for _, c := range s.redis {
		c.c.Close()
	}
	if s.proxy != nil {
		s.proxy.c.Close()
	}
}

func (s *sampler) sample() (snapshot, error) {
	var snap snapshot
	for i, c := range s.redis {
		info, err := c.info("cpu", "commandstats", "stats")
		if err != nil {
			return snap, fmt.Errorf("INFO from %s: %w", s.redisAddr[i], err)
		}
		sys, _ := strconv.ParseFloat(info["used_cpu_sys"], 64)
		user, _ := strconv.ParseFloat(info["used_cpu_user"], 64)
		total, _ := strconv.ParseInt(info["total_commands_processed"], 10, 64)
		snap.redis = append(snap.redis, redisCounters{
			cpu:      sys + user,
			evalsha:  commandCalls(info, "evalsha") + commandCalls(info, "eval"),
			commands: total,
		})
	}
	if s.proxy != nil {
		info, err := s.proxy.info("limiters")
		if err != nil {
			return snap, fmt.Errorf("INFO from rlproxy: %w", err)
		}
		num := func(k string) int64 { n, _ := strconv.ParseInt(info[k], 10, 64); return n }
		snap.proxy.granted, snap.proxy.denied = num("granted"), num("denied")
		snap.proxy.deniedFromCache = num("denied_from_cache")
	}
	if s.proxyPid > 0 {
		cpu, err := processCPU(s.proxyPid)
		if err != nil {
			return snap, err
		}
		snap.proxy.cpu = cpu
	}
	snap.self = selfCPU()
	return snap, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// processCPU returns a process's user+system CPU seconds (all threads).
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("rlproxy CPU: %w", err)
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces, so
// fields are counted from its closing parenthesis.
func parseProcStat(line string) (float64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("rlproxy CPU: malformed /proc stat line")
	}
	f := strings.Fields(line[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("rlproxy CPU: short /proc stat line")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("rlproxy CPU: malformed /proc stat times")
	}
	return float64(utime+stime) / clockTicks, nil
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(ru.Utime) + sec(ru.Stime)
}
