package server

// Counters are the server's figures that INFO shows in its Clients and
// Stats sections, for /metrics.
type Counters struct {
	ConnectedClients int64 // now
	Connections      int64 // accepted, ever
	Commands         int64 // processed, ever
	Rejected         int64 // connections refused: max_clients
	Panics           int64 // recovered handler panics
}

// Counters returns the server's figures now.
func (s *Server) Counters() Counters {
	return Counters{
		ConnectedClients: int64(s.connectedClients()),
		Connections:      s.stats.connections.Load(),
		Commands:         s.stats.commands.Load(),
		Rejected:         s.stats.rejected.Load(),
		Panics:           s.stats.panics.Load(),
	}
}
