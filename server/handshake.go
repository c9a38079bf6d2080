package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/rlproxy/rlproxy/commands"
)

// Handshake commands: what client libraries send when they connect with
// their default options, answered the way Redis 7 answers them — the
// feature's reply where rlproxy has the feature (or it is moot), and
// Redis's own error where it has not, so each library takes the path it
// takes against such a Redis:
//
//   - CLIENT TRACKING ON OPTIN (rueidis, client-side caching on by
//     default): +OK. rlproxy has no cacheable reads, so no invalidation is
//     ever sent. CLIENT CACHING, GETREDIR and TRACKINGINFO follow the mode.
//   - CLIENT NO-EVICT / NO-TOUCH ON|OFF: +OK.
//   - CLUSTER ... (rueidis and others probe it to tell a cluster from a
//     single node), READONLY, READWRITE, ASKING: "ERR This instance has
//     cluster support disabled", as a non-cluster Redis says.
//   - ROLE and INFO replication: a primary without replicas (clients that
//     look for the primary read role: from them).

// errNoCluster is a non-cluster Redis's answer to cluster commands.
var errNoCluster = fmt.Errorf("This instance has cluster support disabled")

func (s *Server) handshakeCommands() []commands.Command {
	noCluster := func(context.Context, commands.Caller, []string) (any, error) { return nil, errNoCluster }
	return []commands.Command{
		{Name: "CLUSTER", Arity: -2, Group: "cluster", Summary: "Not a cluster: answers that cluster support is disabled, as a standalone Redis does.", Handler: noCluster},
		{Name: "READONLY", Arity: 1, Group: "cluster", Summary: "Not a cluster: answers that cluster support is disabled.", Handler: noCluster},
		{Name: "READWRITE", Arity: 1, Group: "cluster", Summary: "Not a cluster: answers that cluster support is disabled.", Handler: noCluster},
		{Name: "ASKING", Arity: 1, Group: "cluster", Summary: "Not a cluster: answers that cluster support is disabled.", Handler: noCluster},
		{Name: "ROLE", Arity: 1, Group: "server", Summary: "Returns the role: a primary (master) without replicas.",
			Handler: func(context.Context, commands.Caller, []string) (any, error) {
				return []any{"master", int64(0), []any{}}, nil
			}},
	}
}

// onOff accepts CLIENT NO-EVICT|NO-TOUCH ON|OFF.
func onOff(_ *client, args []string) (any, error) {
	switch strings.ToLower(args[2]) {
	case "on", "off":
		return commands.OK, nil
	}
	return nil, commands.ErrSyntax
}

// clientTracking answers CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX
// prefix]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP], checking the options as
// Redis does.
func (s *Server) clientTracking(c *client, args []string) (any, error) {
	on := false
	switch strings.ToLower(args[2]) {
	case "on":
		on = true
	case "off":
	default:
		return nil, commands.ErrSyntax
	}
	optin, optout, bcast, prefixes := false, false, false, 0
	for i := 3; i < len(args); i++ {
		switch strings.ToLower(args[i]) {
		case "redirect":
			if i+1 >= len(args) {
				return nil, commands.ErrSyntax
			}
			id, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("value is not an integer or out of range")
			}
			if id != c.id && !s.hasClient(id) {
				return nil, fmt.Errorf("The client ID you want redirect to does not exist")
			}
			i++
		case "prefix":
			if i+1 >= len(args) {
				return nil, commands.ErrSyntax
			}
			prefixes++
			i++
		case "bcast":
			bcast = true
		case "optin":
			optin = true
		case "optout":
			optout = true
		case "noloop":
		default:
			return nil, commands.ErrSyntax
		}
	}
	switch {
	case !on:
	case optin && optout:
		return nil, fmt.Errorf("You can't use both OPTIN and OPTOUT")
	case bcast && (optin || optout):
		return nil, fmt.Errorf("OPTIN and OPTOUT are not compatible with BCAST")
	case prefixes > 0 && !bcast:
		return nil, fmt.Errorf("PREFIX option requires BCAST mode to be enabled")
	}
	mode := ""
	switch {
	case !on:
	case optin:
		mode = "optin"
	case optout:
		mode = "optout"
	case bcast:
		mode = "bcast"
	default:
		mode = "on"
	}
	c.mu.Lock()
	c.tracking = mode
	c.mu.Unlock()
	return commands.OK, nil
}

func (s *Server) clientCaching(c *client, args []string) (any, error) {
	if c.tracking != "optin" && c.tracking != "optout" {
		return nil, fmt.Errorf("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	}
	switch strings.ToLower(args[2]) {
	case "yes", "no":
		return commands.OK, nil
	}
	return nil, commands.ErrSyntax
}

func (s *Server) clientGetRedir(c *client, _ []string) (any, error) {
	if c.tracking == "" {
		return int64(-1), nil
	}
	return int64(0), nil
}

func (s *Server) clientTrackingInfo(c *client, _ []string) (any, error) {
	flags := []any{"off"}
	redirect := int64(-1)
	if c.tracking != "" {
		flags, redirect = []any{"on"}, 0
		if c.tracking != "on" {
			flags = append(flags, c.tracking)
		}
	}
	return commands.Map{"flags", flags, "redirect", redirect, "prefixes", []any{}}, nil
}

func (s *Server) hasClient(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients[id] != nil
}

// randomID is 40 hex digits, like a Redis replication id.
func randomID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
