package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rlproxy/rlproxy/commands"
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
			{Name: "NO-EVICT", Arity: 3, Summary: "Accepted for compatibility.", Handler: conn(okHandler)},
			{Name: "NO-TOUCH", Arity: 3, Summary: "Accepted for compatibility.", Handler: conn(okHandler)},
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
	for i := 2; i < len(args); i++ {
		switch {
		case strings.EqualFold(args[i], "AUTH") && i+2 < len(args):
			if _, err := s.auth(c, []string{"AUTH", args[i+1], args[i+2]}); err != nil {
				return nil, err
			}
			i += 2
		case strings.EqualFold(args[i], "SETNAME") && i+1 < len(args):
			if err := validName(args[i+1]); err != nil {
				return nil, err
			}
			name, named = args[i+1], true
			i++
		default:
			return nil, fmt.Errorf("syntax error in HELLO option '%s'", quoteArg(args[i]))
		}
	}
	if !c.authed {
		return nil, fmt.Errorf("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	}
	c.proto = proto
	if named {
		c.name = name
	}
	return commands.Map{
		"server", "redis",
		"version", redisVersion,
		"proto", int64(c.proto),
		"id", c.id,
		"mode", "standalone",
		"role", "master",
		"modules", []any{},
	}, nil
}

func (s *Server) auth(c *client, args []string) (any, error) {
	user, pass := "default", args[len(args)-1]
	if len(args) == 3 {
		user = args[1]
	} else if len(args) != 2 {
		return nil, fmt.Errorf("syntax error")
	}
	if s.opts.RequirePass == "" {
		if len(args) == 2 {
			return nil, fmt.Errorf("AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		}
		c.authed = true
		return commands.OK, nil
	}
	if user != "default" || !checkPassword(s.opts.RequirePass, pass) {
		return nil, fmt.Errorf("WRONGPASS invalid username-password pair or user is disabled.")
	}
	c.authed = true
	return commands.OK, nil
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
	c.proto, c.name, c.authed = 2, "", s.opts.RequirePass == ""
	return commands.Status("RESET"), nil
}

// validName applies Redis's rule for connection names.
func validName(name string) error {
	for _, r := range name {
		if r < '!' || r > '~' {
			return fmt.Errorf("Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

func (s *Server) clientSetName(c *client, args []string) (any, error) {
	if err := validName(args[2]); err != nil {
		return nil, err
	}
	c.name = args[2]
	return commands.OK, nil
}

func (s *Server) clientSetInfo(c *client, args []string) (any, error) {
	switch strings.ToUpper(args[2]) {
	case "LIB-NAME", "LIB-VER":
		c.lib = strings.TrimSpace(c.lib + " " + args[3])
		return commands.OK, nil
	}
	return nil, fmt.Errorf("Unrecognized option '%s'", quoteArg(args[2]))
}

func (s *Server) describe(c *client) string {
	return fmt.Sprintf("id=%d addr=%s name=%s age=%d resp=%d lib=%s",
		c.id, c.addr, c.name, int(time.Since(c.created).Seconds()), c.proto, strings.ReplaceAll(c.lib, " ", "/"))
}

func (s *Server) clientList(*client, []string) (any, error) {
	s.mu.Lock()
	var b strings.Builder
	for _, c := range s.clients {
		b.WriteString(s.describe(c))
		b.WriteString("\n")
	}
	s.mu.Unlock()
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
	for _, cmd := range s.selected(args) {
		if cmd != nil {
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
