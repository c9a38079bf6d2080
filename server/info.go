package server

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// info answers INFO [section ...] with "# Section" blocks of field:value
// lines, like Redis. ioredis waits for "loading:0" before it is ready, so
// every user gets INFO; a user without admin gets it without the
// AdminOnly sections (backend addresses), as if they did not exist.
func (s *Server) info(c *client, args []string) (any, error) {
	sections := []InfoSection{
		{Name: "Server", Lines: s.serverInfo},
		{Name: "Clients", Lines: func() []string {
			return []string{
				fmt.Sprintf("connected_clients:%d", s.Stats().ConnectedClients),
				fmt.Sprintf("maxclients:%d", s.limits().MaxClients),
			}
		}},
		{Name: "Persistence", Lines: func() []string { return []string{"loading:0"} }},
		{Name: "Stats", Lines: func() []string {
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
		}},
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
	sections = append(sections, s.opts.Info...)
	want := map[string]bool{}
	for _, a := range args[1:] {
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
	return b.String(), nil
}

func (s *Server) serverInfo() []string {
	uptime := time.Since(s.started)
	return []string{
		"redis_version:" + redisVersion,
		"rlproxy_version:" + s.opts.Version,
		"redis_mode:standalone",
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
	}
}
