// Package commands is rlproxy's own commands (RL.*, RL.POLICY, CL.THROTTLE,
// GCRA, the leases): it parses each into a typed request, validates it,
// hands it to the limiter service (ratelimit, lease) and encodes the
// reply. It also holds the command table type that every command — these
// and the server's connection commands — is declared in, so arity checks,
// dispatch and COMMAND DOCS/INFO read one list.
package commands

import (
	"context"
	"sort"
	"strings"
)

// Caller is what a handler may know about the calling connection.
type Caller interface {
	// Name is the connection's name (CLIENT SETNAME), "" when unnamed.
	Name() string
	// Watch returns a context that ends when the client disconnects, for
	// handlers that wait.
	Watch(ctx context.Context) (context.Context, context.CancelFunc)
}

// Handler runs one command. args[0] is the command name as sent.
type Handler func(ctx context.Context, c Caller, args []string) (any, error)

// BatchHandler starts calls of one command from one client — a run of
// neighbouring calls of a pipeline, or a lone call as a batch of one —
// and answers each through reply(i, v) with the call's index and its
// reply (or error), perhaps later and on another goroutine, so that the
// connection need not hold a goroutine asleep meanwhile. calls[i][0] is
// the command name as sent. reply must be called exactly once per call;
// it may be called concurrently.
type BatchHandler func(ctx context.Context, c Caller, calls [][]string, reply func(i int, v any))

// Arg describes one argument for COMMAND DOCS (redis-cli builds its
// typing hints from these).
type Arg struct {
	Name     string
	Type     string // key, integer, double, string, pure-token, oneof, block
	Token    string // the keyword before the value, e.g. "BURST"
	Optional bool
	Multiple bool
	Args     []Arg // for oneof and block
}

// Command is one entry of the command table.
type Command struct {
	Name   string // upper case, e.g. "RL.ACQUIRE"
	Arity  int    // Redis convention: N = exactly N words, -N = at least N
	Flags  []string
	KeyPos int // position of the first key (0 = none)
	// OtherKeys, when set, returns a call's keys after the first (RL.ACQUIRE
	// ... ALSO key): each is checked as the first is.
	OtherKeys func(args []string) []string
	Group     string // e.g. "ratelimit", "connection"
	Summary   string
	Args      []Arg
	Handler   Handler
	// PatternPos is the position of a policy pattern (0 = none): its
	// prefix is bounded as a name is, or no name could match it.
	PatternPos int
	// Batch, when set, is how the server runs this command: a run of
	// neighbouring calls of it from one client's pipeline go together, so
	// they can share backend calls, and a call that comes alone is
	// answered without a goroutine waiting for it. Handler is nil then.
	// Only for commands that read and change no connection state.
	Batch BatchHandler
	// Sub are subcommands (CLIENT SETNAME, COMMAND DOCS, ...), by upper-case name.
	Sub []Command
}

// Table is the set of commands a server answers.
type Table struct {
	byName map[string]*Command
}

// NewTable builds a table from lists of commands.
func NewTable(lists ...[]Command) *Table {
	t := &Table{byName: map[string]*Command{}}
	for _, l := range lists {
		for i := range l {
			t.byName[l[i].Name] = &l[i]
		}
	}
	return t
}

// Lookup finds a command by name, in any case (ASCII, as Redis compares
// names). It runs several times per request, so it does not allocate:
// names come as clients spell them, often in lower case.
func (t *Table) Lookup(name string) *Command {
	if c := t.byName[name]; c != nil {
		return c
	}
	var buf [32]byte // room for every command's name: no allocation
	up, lower := buf[:0], false
	for i := range len(name) {
		ch := name[i]
		if 'a' <= ch && ch <= 'z' {
			ch, lower = ch-('a'-'A'), true
		}
		up = append(up, ch)
	}
	if !lower {
		return nil // already looked up as it is
	}
	return t.byName[string(up)] // a lookup by string(bytes) does not allocate
}

// All returns every command, sorted by name.
func (t *Table) All() []*Command {
	all := make([]*Command, 0, len(t.byName))
	for _, c := range t.byName {
		all = append(all, c)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

// ArityOK checks a call's word count against the Redis arity convention.
func (c *Command) ArityOK(words int) bool {
	if c.Arity >= 0 {
		return words == c.Arity
	}
	return words >= -c.Arity
}

// SubCommand finds a subcommand by name, in any case.
func (c *Command) SubCommand(name string) *Command {
	for i := range c.Sub {
		if strings.EqualFold(c.Sub[i].Name, name) {
			return &c.Sub[i]
		}
	}
	return nil
}

// Info is the command's COMMAND INFO entry.
func (c *Command) Info() []any {
	flags := make([]any, len(c.Flags))
	for i, f := range c.Flags {
		flags[i] = Status(f)
	}
	first, last, step := 0, 0, 0
	if c.KeyPos > 0 {
		first, last, step = c.KeyPos, c.KeyPos, 1
	}
	subs := []any{}
	for i := range c.Sub {
		s := c.Sub[i]
		s.Name = strings.ToLower(c.Name + "|" + s.Name)
		subs = append(subs, s.Info())
	}
	return []any{strings.ToLower(c.Name), int64(c.Arity), flags, int64(first), int64(last), int64(step), []any{}, []any{}, []any{}, subs}
}

// Docs is the command's COMMAND DOCS entry.
func (c *Command) Docs() Map {
	d := Map{"summary", c.Summary, "since", "1.0.0", "group", c.Group}
	if len(c.Args) > 0 {
		d = append(d, "arguments", docArgs(c.Args))
	}
	if len(c.Sub) > 0 {
		subs := Map{}
		for i := range c.Sub {
			s := c.Sub[i]
			subs = append(subs, strings.ToLower(c.Name+"|"+s.Name), s.Docs())
		}
		d = append(d, "subcommands", subs)
	}
	return d
}

func docArgs(args []Arg) []any {
	out := make([]any, len(args))
	for i, a := range args {
		m := Map{"name", a.Name, "type", a.Type}
		if a.Type == "key" {
			m = append(m, "key_spec_index", int64(0))
		}
		if a.Token != "" {
			m = append(m, "token", a.Token)
		}
		var flags []any
		if a.Optional {
			flags = append(flags, Status("optional"))
		}
		if a.Multiple {
			flags = append(flags, Status("multiple"))
		}
		if flags != nil {
			m = append(m, "flags", flags)
		}
		if len(a.Args) > 0 {
			m = append(m, "arguments", docArgs(a.Args))
		}
		out[i] = m
	}
	return out
}
