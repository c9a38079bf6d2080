package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/oneline"
)

// redisVersion is the Redis version rlproxy answers as: clients pick
// features by it, and rlproxy speaks Redis 7's protocol (RESP3, COMMAND DOCS).
const redisVersion = "7.0.0"

// connectionCommands are the commands real clients send around their
// work: handshakes, names, introspection.
func (s *Server) connectionCommands() []commands.Command {
	conn := func(f func(c *client, args []string) (any, error)) commands.Handler {
		return func(_ context.Context, caller commands.Caller, args []string) (any, error) {
			return f(caller.(*client), args)
		}
	}
	str := func(name string) commands.Arg { return commands.Arg{Name: name, Type: "string"} }
	opt := func(a commands.Arg) commands.Arg { a.Optional = true; return a }
	return []commands.Command{
		{Name: "PING", Arity: -1, Group: "connection", Summary: "Returns PONG, or the message.",
			Args: []commands.Arg{opt(str("message"))}, Handler: conn(s.ping)},
		{Name: "ECHO", Arity: 2, Group: "connection", Summary: "Returns the message.",
			Args: []commands.Arg{str("message")}, Handler: conn(func(_ *client, a []string) (any, error) { return a[1], nil })},
		{Name: "QUIT", Arity: -1, Group: "connection", Summary: "Closes the connection.", Handler: conn(s.quit)},
		{Name: "HELLO", Arity: -1, Group: "connection", Summary: "Handshakes: chooses RESP2 or RESP3, optionally authenticates and names the connection.",
			Args: []commands.Arg{opt(commands.Arg{Name: "protover", Type: "integer"}),
				opt(commands.Arg{Name: "auth", Type: "block", Token: "AUTH", Args: []commands.Arg{str("username"), str("password")}}),
				opt(commands.Arg{Name: "clientname", Type: "string", Token: "SETNAME"})},
			Handler: conn(s.hello)},
		{Name: "AUTH", Arity: -2, Group: "connection", Summary: "Authenticates the connection.",
			Args: []commands.Arg{opt(str("username")), str("password")}, Handler: conn(s.auth)},
		{Name: "SELECT", Arity: 2, Group: "connection", Summary: "Selects database 0 (the only one).",
			Args: []commands.Arg{{Name: "index", Type: "integer"}}, Handler: conn(s.selectDB)},
		{Name: "RESET", Arity: 1, Group: "connection", Summary: "Resets the connection: RESP2, no name, not authenticated.",
			Handler: conn(s.reset)},
		{Name: "CLIENT", Arity: -2, Group: "connection", Summary: "Names and inspects connections.", Sub: []commands.Command{
			{Name: "SETNAME", Arity: 3, Summary: "Names the connection (the budget key of PER_CLIENT limiters).",
				Args: []commands.Arg{str("connection-name")}, Handler: conn(s.clientSetName)},
			{Name: "GETNAME", Arity: 2, Summary: "Returns the connection's name.", Handler: conn(func(c *client, _ []string) (any, error) {
				if c.name == "" {
					return nil, nil
				}
				return c.name, nil
			})},
			{Name: "ID", Arity: 2, Summary: "Returns the connection's id.", Handler: conn(func(c *client, _ []string) (any, error) { return c.id, nil })},
			{Name: "SETINFO", Arity: 4, Summary: "Records the client library's name or version.",
				Args: []commands.Arg{{Name: "attr", Type: "oneof", Args: []commands.Arg{
					{Name: "libname", Type: "string", Token: "LIB-NAME"}, {Name: "libver", Type: "string", Token: "LIB-VER"}}}},
				Handler: conn(s.clientSetInfo)},
			{Name: "INFO", Arity: 2, Summary: "Describes this connection.", Handler: conn(func(c *client, _ []string) (any, error) {
				return s.describe(c) + "\n", nil
			})},
			{Name: "LIST", Arity: -2, Summary: "Describes every connection.", Handler: conn(s.clientList)},
			{Name: "NO-EVICT", Arity: 3, Summary: "Accepted (ON|OFF) for compatibility: rlproxy evicts no client.", Handler: conn(onOff)},
			{Name: "NO-TOUCH", Arity: 3, Summary: "Accepted (ON|OFF) for compatibility: rlproxy has no key access times.", Handler: conn(onOff)},
			{Name: "PAUSE", Arity: -3, Summary: "Refused: pausing clients would hold every limiter's callers.", Handler: conn(notSupported("client|pause"))},
			{Name: "UNPAUSE", Arity: 2, Summary: "Refused, as CLIENT PAUSE is.", Handler: conn(notSupported("client|unpause"))},
			{Name: "KILL", Arity: -3, Summary: "Refused: close a connection from its own side, or restart rlproxy.", Handler: conn(notSupported("client|kill"))},
			{Name: "UNBLOCK", Arity: -3, Summary: "Unblocks a client blocked in a forwarded command (BLPOP, ...): TIMEOUT (default) or ERROR.", Handler: conn(s.clientUnblock)},
			{Name: "REPLY", Arity: 3, Summary: "ON|OFF|SKIP: sends the replies, none, or none to the next command.", Handler: conn(s.clientReply)},
			{Name: "TRACKING", Arity: -3, Summary: "Accepted (ON|OFF [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP]): rlproxy has no cacheable reads, so no invalidation ever comes.",
				Handler: conn(s.clientTracking)},
			{Name: "CACHING", Arity: 3, Summary: "Accepted (YES|NO) in OPTIN/OPTOUT tracking mode.", Handler: conn(s.clientCaching)},
			{Name: "GETREDIR", Arity: 2, Summary: "Returns -1 (tracking off) or 0 (on, no redirection).", Handler: conn(s.clientGetRedir)},
			{Name: "TRACKINGINFO", Arity: 2, Summary: "Describes the connection's tracking mode.", Handler: conn(s.clientTrackingInfo)},
			{Name: "HELP", Arity: 2, Summary: "Lists the subcommands.", Handler: conn(s.help("CLIENT"))},
		}},
		{Name: "COMMAND", Arity: -1, Group: "server", Summary: "Describes the commands rlproxy answers.",
			Handler: conn(s.commandInfo), Sub: []commands.Command{
				{Name: "COUNT", Arity: 2, Summary: "Returns the number of commands.", Handler: conn(func(*client, []string) (any, error) {
					return int64(len(s.table.All())), nil
				})},
				{Name: "DOCS", Arity: -2, Summary: "Documents commands (redis-cli builds its hints from this).", Handler: conn(s.commandDocs)},
				{Name: "INFO", Arity: -2, Summary: "Describes commands.", Handler: conn(s.commandInfo)},
				{Name: "LIST", Arity: -2, Summary: "Lists command names.", Handler: conn(s.commandList)},
				{Name: "HELP", Arity: 2, Summary: "Lists the subcommands.", Handler: conn(s.help("COMMAND"))},
			}},
		{Name: "INFO", Arity: -1, Group: "server", Summary: "Returns information and statistics about rlproxy.",
			Args: []commands.Arg{opt(commands.Arg{Name: "section", Type: "string", Multiple: true})}, Handler: conn(s.info)},
		{Name: "CONFIG", Arity: -2, Group: "server", Summary: "Server configuration (read from rlproxy's config, not settable here).", Sub: []commands.Command{
			{Name: "GET", Arity: -3, Summary: "Returns nothing: rlproxy has no Redis config parameters.", Handler: conn(func(*client, []string) (any, error) {
				return commands.Map{}, nil
			})},
			{Name: "SET", Arity: -4, Summary: "Not supported.", Handler: conn(func(*client, []string) (any, error) {
				return nil, fmt.Errorf("CONFIG SET is not supported by rlproxy: change its config file or flags")
			})},
			{Name: "RESETSTAT", Arity: 2, Summary: "Accepted for compatibility.", Handler: conn(okHandler)},
			{Name: "HELP", Arity: 2, Summary: "Lists the subcommands.", Handler: conn(s.help("CONFIG"))},
		}},
	}
}

func okHandler(*client, []string) (any, error) { return commands.OK, nil }

func (s *Server) ping(c *client, args []string) (any, error) {
	switch len(args) {
	case 1:
		return commands.Status("PONG"), nil
	case 2:
		return args[1], nil
	}
	return nil, commands.ArityError("ping")
}

func (s *Server) quit(c *client, _ []string) (any, error) {
	c.quit = true
	return commands.OK, nil
}

// hello answers HELLO [protover [AUTH user pass] [SETNAME name]]. It is
// all or nothing: every option is checked (and the password) before
// anything of the connection changes.
func (s *Server) hello(c *client, args []string) (any, error) {
	proto := c.proto
	if len(args) > 1 {
		v, err := strconv.Atoi(args[1])
		if err != nil {
			return nil, fmt.Errorf("Protocol version is not an integer or out of range")
		}
		if v != 2 && v != 3 {
			return nil, fmt.Errorf("NOPROTO unsupported protocol version")
		}
		proto = v
	}
	name, named := "", false
	var auth []string
	for i := 2; i < len(args); i++ {
		switch {
		case strings.EqualFold(args[i], "AUTH") && i+2 < len(args):
			auth = args[i+1 : i+3]
			i += 2
		case strings.EqualFold(args[i], "SETNAME") && i+1 < len(args):
			if err := s.validName(args[i+1]); err != nil {
				return nil, err
			}
			name, named = args[i+1], true
			i++
		default:
			return nil, fmt.Errorf("syntax error in HELLO option %s", oneline.Quote(args[i]))
		}
	}
	if auth != nil {
		if err := s.authenticate(c, auth[0], auth[1], true); err != nil {
			return nil, err
		}
	}
	if !c.authed {
		return nil, fmt.Errorf("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	}
	version := s.version(c)
	c.mu.Lock()
	c.proto = proto
	if named {
		c.name = name
	}
	c.mu.Unlock()
	return commands.Map{
		"server", "redis",
		"version", version,
		"proto", int64(c.proto),
		"id", c.id,
		"mode", "standalone",
		"role", "master",
		"modules", []any{},
	}, nil
}

func (s *Server) auth(c *client, args []string) (any, error) {
	switch len(args) {
	case 2:
		return commands.OK, s.authenticate(c, "default", args[1], false)
	case 3:
		return commands.OK, s.authenticate(c, args[1], args[2], true)
	}
	return nil, fmt.Errorf("syntax error")
}

func (s *Server) selectDB(_ *client, args []string) (any, error) {
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return nil, fmt.Errorf("value is not an integer or out of range")
	}
	if n != 0 {
		return nil, fmt.Errorf("DB index is out of range")
	}
	return commands.OK, nil
}

func (s *Server) reset(c *client, _ []string) (any, error) {
	c.endSession() // ends a MULTI, subscriptions and SELECT on the backend too
	c.mu.Lock()
	c.proto, c.name = 2, "" // the library stays: it is still the one behind the connection (as in Redis)
	c.tracking = ""
	c.mu.Unlock()
	c.reply.off, c.reply.skipNext = false, false // as Redis: a SKIP of this RESET's reply holds
	c.authed = false
	c.user.Store(nil)
	if !s.access.Load().required {
		c.login(everyone)
	}
	return commands.Status("RESET"), nil
}

// validName applies Redis's rule for connection names, and
// max_name_length (a name is part of a PER_CLIENT limiter's keys).
func (s *Server) validName(name string) error {
	if max := s.limits().MaxNameLength; len(name) > max {
		return fmt.Errorf("client name is longer than %d bytes", max)
	}
	for _, r := range name {
		if r < '!' || r > '~' {
			return fmt.Errorf("Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

func (s *Server) clientSetName(c *client, args []string) (any, error) {
	if err := s.validName(args[2]); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.name = args[2]
	c.mu.Unlock()
	return commands.OK, nil
}

func (s *Server) clientSetInfo(c *client, args []string) (any, error) {
	attr, value := strings.ToLower(args[2]), args[3]
	if attr != "lib-name" && attr != "lib-ver" {
		return nil, fmt.Errorf("Unrecognized option %s", oneline.Quote(args[2]))
	}
	if max := s.limits().MaxNameLength; len(value) > max {
		return nil, fmt.Errorf("%s is longer than %d bytes", attr, max)
	}
	if s.validName(value) != nil {
		return nil, fmt.Errorf("%s cannot contain spaces, newlines or special characters.", attr)
	}
	c.mu.Lock()
	if attr == "lib-name" {
		c.libName = value
	} else {
		c.libVer = value
	}
	c.mu.Unlock()
	return commands.OK, nil
}

// seen records the connection's latest command and when it came, for
// CLIENT INFO's cmd= and idle=. It runs for every request, so it keeps
// the words as they came: describe looks them up.
func (s *Server) seen(c *client, args []string) {
	word1 := ""
	if len(args) > 1 {
		word1 = args[1]
	}
	now := time.Now()
	c.mu.Lock()
	c.lastAt, c.lastCmd = now, [2]string{args[0], word1}
	c.mu.Unlock()
}

// describe is the connection's line of CLIENT INFO and CLIENT LIST, with
// Redis's fields in Redis's order so that client libraries parse it
// (redis-py converts the numeric ones with int()). The fields about
// Redis's own buffers, databases and pub/sub are constant: rlproxy has
// none of these; fd is -1.
func (s *Server) describe(c *client) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := "NULL"
	if known := s.table.Lookup(c.lastCmd[0]); known != nil {
		cmd = strings.ToLower(known.Name)
		if sub := known.SubCommand(c.lastCmd[1]); sub != nil {
			cmd += "|" + strings.ToLower(sub.Name)
		}
	}
	now := time.Now()
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=-1 name=%s age=%d idle=%d flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "+
		"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=%s redir=-1 resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, c.laddr, c.name, int(now.Sub(c.created).Seconds()), int(now.Sub(c.lastAt).Seconds()),
		cmd, c.userName(), c.proto, c.libName, c.libVer)
}

// clientList answers CLIENT LIST [TYPE type] [ID id ...], in id order
// like Redis. Every rlproxy client is of type normal.
func (s *Server) clientList(_ *client, args []string) (any, error) {
	all, ids := true, map[int64]bool(nil)
	for i := 2; i < len(args); i++ {
		switch {
		case strings.EqualFold(args[i], "TYPE") && i+1 < len(args):
			switch t := strings.ToLower(args[i+1]); t {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				all = false
			default:
				return nil, fmt.Errorf("Unknown client type %s", oneline.Quote(args[i+1]))
			}
			i++
		case strings.EqualFold(args[i], "ID") && i+1 < len(args):
			ids = map[int64]bool{}
			for i++; i < len(args); i++ {
				id, err := strconv.ParseInt(args[i], 10, 64)
				if err != nil || id <= 0 {
					return nil, fmt.Errorf("Invalid client ID")
				}
				ids[id] = true
			}
		default:
			return nil, fmt.Errorf("syntax error")
		}
	}
	s.mu.Lock()
	var list []*client
	for id, c := range s.clients {
		if all && (ids == nil || ids[id]) {
			list = append(list, c)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b *client) int { return cmp.Compare(a.id, b.id) })
	var b strings.Builder
	for _, c := range list {
		b.WriteString(s.describe(c))
		b.WriteString("\n")
	}
	return b.String(), nil
}

func (s *Server) help(name string) func(*client, []string) (any, error) {
	return func(*client, []string) (any, error) {
		cmd := s.table.Lookup(name)
		lines := []any{fmt.Sprintf("%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", name)}
		for _, sub := range cmd.Sub {
			lines = append(lines, sub.Name, "    "+sub.Summary)
		}
		return lines, nil
	}
}

// selected returns the commands named in args[2:], or every command.
func (s *Server) selected(args []string) []*commands.Command {
	if len(args) <= 2 {
		return s.table.All()
	}
	var out []*commands.Command
	for _, name := range args[2:] {
		out = append(out, s.table.Lookup(name)) // nil for unknown names
	}
	return out
}

func (s *Server) commandInfo(_ *client, args []string) (any, error) {
	if len(args) == 1 {
		args = []string{"COMMAND", "INFO"}
	}
	var out []any
	for _, cmd := range s.selected(args) {
		if cmd == nil {
			out = append(out, nil)
		} else {
			out = append(out, cmd.Info())
		}
	}
	return out, nil
}

func (s *Server) commandDocs(_ *client, args []string) (any, error) {
	out := commands.Map{}
	seen := map[*commands.Command]bool{} // a map's keys are unique: a repeated name adds nothing
	for _, cmd := range s.selected(args) {
		if cmd != nil && !seen[cmd] {
			seen[cmd] = true
			out = append(out, strings.ToLower(cmd.Name), cmd.Docs())
		}
	}
	return out, nil
}

func (s *Server) commandList(*client, []string) (any, error) {
	var out []any
	for _, cmd := range s.table.All() {
		out = append(out, strings.ToLower(cmd.Name))
	}
	return out, nil
}

// notSupported refuses a subcommand rlproxy does not offer, as the
// gateway contract words it.
func notSupported(name string) func(*client, []string) (any, error) {
	return func(*client, []string) (any, error) {
		return nil, fmt.Errorf("ERR '%s' is not supported by rlproxy", name)
	}
}
