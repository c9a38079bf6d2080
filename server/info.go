package server

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// info answers INFO [section ...] with "# Section" blocks of field:value
// lines, like Redis. ioredis waits for "loading:0" before it is ready, so
// every user gets INFO; a user without admin gets it without the
// AdminOnly sections (backend addresses), as if they did not exist.
//
// With the gateway (and a user who may reach Redis), the Redis behind
// rlproxy is the application's Redis: INFO is the backend's reply (its
// redis_version, memory, keyspace) followed by rlproxy's own sections
// (# rlproxy, # Limiters, # Passthrough, ...): all of them for INFO,
// INFO default|all|everything, else those named. INFO rlproxy alone
// asks nothing of the backend.
func (s *Server) info(c *client, args []string) (any, error) {
	if s.opts.Forward == nil || s.forwardable(c, args) != nil {
		return s.infoText(c, s.lookalikeInfo(), args[1:]), nil
	}
	own := append([]InfoSection{{Name: "rlproxy", Lines: func() []string {
		return append(append(s.ownServerInfo(), s.clientsInfo()...), s.statsInfo()...)
	}}}, s.opts.Info...)
	theirs := []string{"INFO"}
	for _, a := range args[1:] {
		if !slices.ContainsFunc(own, func(sec InfoSection) bool { return strings.EqualFold(sec.Name, a) }) {
			theirs = append(theirs, a)
		}
	}
	text := ""
	if len(theirs) > 1 || len(args) == 1 {
		frame := s.ask(c, theirs)
		body, ok := infoBody(frame)
		if !ok {
			return rawFrame(frame), nil // Redis's error
		}
		text = body
	}
	if mine := s.infoText(c, own, args[1:]); mine != "" {
		if text != "" {
			text += "\r\n"
		}
		text += mine
	}
	if c.proto == 3 { // Redis 7 answers INFO as verbatim text
		return rawFrame(fmt.Appendf(nil, "=%d\r\ntxt:%s\r\n", len(text)+4, text)), nil
	}
	return text, nil
}

// version is the Redis version HELLO gives the client: with the gateway
// (and a user who may reach Redis) the backend's redis_version, as INFO
// gives it; asked once, then kept (a client that cannot ask now, being
// subscribed, gets rlproxy's own).
func (s *Server) version(c *client) string {
	if s.opts.Forward == nil || s.forwardable(c, []string{"INFO"}) != nil {
		return redisVersion
	}
	if v := s.backendVersion.Load(); v != nil {
		return *v
	}
	body, _ := infoBody(s.ask(c, []string{"INFO", "server"})) // "" for an error
	for _, line := range strings.Split(body, "\r\n") {
		if v, found := strings.CutPrefix(line, "redis_version:"); found {
			s.backendVersion.Store(&v)
			return v
		}
	}
	return redisVersion
}

// infoBody returns the text of a backend's INFO reply: a bulk string, or
// RESP3's verbatim text ("txt:" first); false for anything else.
func infoBody(frame []byte) (string, bool) {
	if len(frame) < 4 || (frame[0] != '$' && frame[0] != '=') {
		return "", false
	}
	_, rest, ok := strings.Cut(string(frame), "\r\n")
	if !ok {
		return "", false
	}
	rest = strings.TrimSuffix(rest, "\r\n")
	if frame[0] == '=' {
		rest = strings.TrimPrefix(rest, "txt:")
	}
	return rest, true
}

// infoText renders the sections named (every one for none, "default",
// "all" or "everything") that the client may see.
func (s *Server) infoText(c *client, sections []InfoSection, names []string) string {
	want := map[string]bool{}
	for _, a := range names {
		want[strings.ToLower(a)] = true
	}
	all := len(want) == 0 || want["all"] || want["default"] || want["everything"]
	u := c.user.Load()
	admin := u == nil || u.admin
	var b strings.Builder
	for _, sec := range sections {
		if !all && !want[strings.ToLower(sec.Name)] || sec.AdminOnly && !admin {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + sec.Name + "\r\n")
		for _, l := range sec.Lines() {
			b.WriteString(l + "\r\n")
		}
	}
	return b.String()
}

// lookalikeInfo are INFO's sections without the gateway: rlproxy in
// Redis's shape, then its own.
func (s *Server) lookalikeInfo() []InfoSection {
	sections := []InfoSection{
		{Name: "Server", Lines: func() []string {
			return append([]string{"redis_version:" + redisVersion, "redis_mode:standalone"}, s.ownServerInfo()...)
		}},
		{Name: "Clients", Lines: s.clientsInfo},
		{Name: "Persistence", Lines: func() []string { return []string{"loading:0"} }},
		{Name: "Stats", Lines: s.statsInfo},
		// A primary without replicas, as clients that look for the primary
		// read it (role:master).
		{Name: "Replication", Lines: func() []string {
			return []string{
				"role:master",
				"connected_slaves:0",
				"master_failover_state:no-failover",
				"master_replid:" + s.replID,
				"master_replid2:0000000000000000000000000000000000000000",
				"master_repl_offset:0",
				"second_repl_offset:-1",
				"repl_backlog_active:0",
				"repl_backlog_size:0",
				"repl_backlog_first_byte_offset:0",
				"repl_backlog_histlen:0",
			}
		}},
		{Name: "Cluster", Lines: func() []string { return []string{"cluster_enabled:0"} }},
		{Name: "Keyspace", Lines: func() []string { return nil }},
	}
	return append(sections, s.opts.Info...)
}

func (s *Server) clientsInfo() []string {
	return []string{
		fmt.Sprintf("connected_clients:%d", s.Stats().ConnectedClients),
		fmt.Sprintf("maxclients:%d", s.limits().MaxClients),
	}
}

func (s *Server) statsInfo() []string {
	st := s.Stats()
	return []string{
		fmt.Sprintf("total_connections_received:%d", st.Connections),
		fmt.Sprintf("total_commands_processed:%d", st.Commands),
		fmt.Sprintf("rejected_connections:%d", st.Rejected),
		fmt.Sprintf("accept_errors_out_of_fds:%d", st.AcceptErrors),
		fmt.Sprintf("auth_failures:%d", st.AuthFailures),
		fmt.Sprintf("tls_handshake_failures:%d", st.TLSHandshakeFailures),
		fmt.Sprintf("recovered_panics:%d", st.Panics),
	}
}

// ownServerInfo is rlproxy's process: what Redis's Server section says
// of Redis.
func (s *Server) ownServerInfo() []string {
	uptime := time.Since(s.started)
	return []string{
		"rlproxy_version:" + s.opts.Version,
		"os:" + runtime.GOOS + " " + runtime.GOARCH,
		"go_version:" + runtime.Version(),
		fmt.Sprintf("process_id:%d", os.Getpid()),
		"tcp_port:" + s.port(),
		fmt.Sprintf("uptime_in_seconds:%d", int(uptime.Seconds())),
	}
}

func (s *Server) port() string {
	if s.ln == nil {
		return ""
	}
	addr := s.ln.Addr().String()
	return addr[strings.LastIndex(addr, ":")+1:]
}

// Stats are the server's figures: its clients now, and counts since start.
// INFO shows them in its Clients and Stats sections; /metrics reads them
// too (internal/proxy's stats table).
type Stats struct {
	ConnectedClients     int64 // open client connections now
	Connections          int64 // accepted
	Commands             int64 // processed
	Rejected             int64 // connections refused: max_clients
	AcceptErrors         int64 // accepts failed for want of file descriptors
	AuthFailures         int64 // AUTH and HELLO ... AUTH
	TLSHandshakeFailures int64
	Panics               int64 // recovered
	ClientBufferClosed   int64 // clients closed: passthrough_client_buffer
	LoopCommands         int64 // commands the event loop read and ran (passthrough_loop)
	LoopHoldsExpired     int64 // hand-backs the loop stopped waiting for (passthrough_loop)
}

// Stats returns the server's figures now.
func (s *Server) Stats() Stats {
	return Stats{
		ConnectedClients:     int64(s.connectedClients()),
		Connections:          s.stats.connections.Load(),
		Commands:             s.stats.commands.Load(),
		Rejected:             s.stats.rejected.Load(),
		AcceptErrors:         s.stats.acceptErrors.Load(),
		AuthFailures:         s.authFails.count.Load(),
		TLSHandshakeFailures: s.tlsFails.count.Load(),
		Panics:               s.stats.panics.Load(),
		ClientBufferClosed:   s.stats.bufferClosed.Load(),
		LoopCommands:         s.stats.loopCommands.Load(),
		LoopHoldsExpired:     s.stats.loopHoldsExpired.Load(),
	}
}
