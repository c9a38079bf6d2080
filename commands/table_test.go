package commands

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

func testCommands() []Command {
	return []Command{
		{Name: "PING", Arity: -1, Group: "connection", Summary: "Pings."},
		{Name: "ECHO", Arity: 2, Flags: []string{"fast"}, Group: "connection", Summary: "Echoes.",
			Args: []Arg{{Name: "message", Type: "string"}}},
		{Name: "CLIENT", Arity: -2, Group: "connection", Summary: "Connections.", Sub: []Command{
			{Name: "SETNAME", Arity: 3, Summary: "Names.", Args: []Arg{{Name: "connection-name", Type: "string"}}},
			{Name: "ID", Arity: 2, Summary: "Id."},
		}},
	}
}

func TestTableLookup(t *testing.T) {
	long := "RL.A-COMMAND-NAME-LONGER-THAN-32-BYTES"
	tab := NewTable(testCommands(), []Command{{Name: "RL.GET", Arity: 2, KeyPos: 1}, {Name: long, Arity: 1}})
	for _, name := range []string{"PING", "ping", "PiNg", "client", "rl.get", "RL.Get", strings.ToLower(long)} {
		if tab.Lookup(name) == nil {
			t.Errorf("Lookup(%q) = nil", name)
		}
	}
	// Names compare in ASCII, as Redis compares them: no Unicode folding
	// ("ı" upper-cases to "I" in Go).
	for _, name := range []string{"", "PIN", "PINGS", "rl", "SETNAME", "CLIENT SETNAME", "pıng",
		"ping" + string(make([]byte, 40))} {
		if c := tab.Lookup(name); c != nil {
			t.Errorf("Lookup(%q) = %s, want nil", name, c.Name)
		}
	}
	// Run several times per request: no allocation, whatever the case.
	for _, name := range []string{"PING", "rl.get", "unknown", "get"} {
		if n := testing.AllocsPerRun(100, func() { tab.Lookup(name) }); n != 0 {
			t.Errorf("Lookup(%q) allocates %v times", name, n)
		}
	}
	var names []string
	for _, c := range tab.All() {
		names = append(names, c.Name)
	}
	if want := []string{"CLIENT", "ECHO", "PING", long, "RL.GET"}; !reflect.DeepEqual(names, want) {
		t.Errorf("All() = %v, want %v", names, want)
	}

	client := tab.Lookup("client")
	for _, name := range []string{"SETNAME", "setname", "Id"} {
		if client.SubCommand(name) == nil {
			t.Errorf("SubCommand(%q) = nil", name)
		}
	}
	if s := client.SubCommand("KILL"); s != nil {
		t.Errorf("SubCommand(KILL) = %s, want nil", s.Name)
	}

	// A later list may replace a command of an earlier one.
	tab = NewTable(testCommands(), []Command{{Name: "PING", Arity: 1}})
	if got := tab.Lookup("ping").Arity; got != 1 {
		t.Errorf("PING arity = %d, want the later list's 1", got)
	}
}

func TestArityOK(t *testing.T) {
	tests := []struct {
		arity, words int
		ok           bool
	}{
		{2, 1, false}, {2, 2, true}, {2, 3, false},
		{1, 1, true}, {1, 2, false},
		{-1, 1, true}, {-1, 5, true},
		{-2, 1, false}, {-2, 2, true}, {-2, 3, true}, {-2, 100, true},
		{-4, 3, false}, {-4, 4, true},
	}
	for _, tt := range tests {
		c := &Command{Name: "X", Arity: tt.arity}
		if got := c.ArityOK(tt.words); got != tt.ok {
			t.Errorf("arity %d, %d words: ArityOK = %v, want %v", tt.arity, tt.words, got, tt.ok)
		}
	}
}

func TestInfo(t *testing.T) {
	tab := NewTable(testCommands(), []Command{{Name: "RL.GET", Arity: 2, Flags: []string{"readonly"}, KeyPos: 1}})
	got := tab.Lookup("RL.GET").Info()
	want := []any{"rl.get", int64(2), []any{Status("readonly")}, int64(1), int64(1), int64(1), []any{}, []any{}, []any{}, []any{}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RL.GET Info() =\n %#v\nwant %#v", got, want)
	}
	got = tab.Lookup("CLIENT").Info()
	want = []any{"client", int64(-2), []any{}, int64(0), int64(0), int64(0), []any{}, []any{}, []any{}, []any{
		[]any{"client|setname", int64(3), []any{}, int64(0), int64(0), int64(0), []any{}, []any{}, []any{}, []any{}},
		[]any{"client|id", int64(2), []any{}, int64(0), int64(0), int64(0), []any{}, []any{}, []any{}, []any{}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CLIENT Info() =\n %#v\nwant %#v", got, want)
	}
}

func TestDocs(t *testing.T) {
	tab := NewTable(testCommands())
	got := tab.Lookup("CLIENT").Docs()
	want := Map{"summary", "Connections.", "since", "1.0.0", "group", "connection", "subcommands", Map{
		"client|setname", Map{"summary", "Names.", "since", "1.0.0", "group", "",
			"arguments", []any{Map{"name", "connection-name", "type", "string"}}},
		"client|id", Map{"summary", "Id.", "since", "1.0.0", "group", ""},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CLIENT Docs() =\n %#v\nwant %#v", got, want)
	}

	c := Command{Name: "RL.X", Arity: -2, Group: "ratelimit", Summary: "X.", KeyPos: 1, Args: []Arg{
		{Name: "key", Type: "key"},
		{Name: "n", Type: "integer", Optional: true},
		{Name: "wait", Type: "oneof", Optional: true, Args: []Arg{
			{Name: "timeout", Type: "string", Token: "TIMEOUT"},
			{Name: "block", Type: "pure-token", Token: "BLOCK"}}},
		{Name: "tag", Type: "string", Token: "TAG", Optional: true, Multiple: true},
	}}
	want = Map{"summary", "X.", "since", "1.0.0", "group", "ratelimit", "arguments", []any{
		Map{"name", "key", "type", "key", "key_spec_index", int64(0)},
		Map{"name", "n", "type", "integer", "flags", []any{Status("optional")}},
		Map{"name", "wait", "type", "oneof", "flags", []any{Status("optional")}, "arguments", []any{
			Map{"name", "timeout", "type", "string", "token", "TIMEOUT"},
			Map{"name", "block", "type", "pure-token", "token", "BLOCK"}}},
		Map{"name", "tag", "type", "string", "token", "TAG", "flags", []any{Status("optional"), Status("multiple")}},
	}}
	if got := c.Docs(); !reflect.DeepEqual(got, want) {
		t.Errorf("RL.X Docs() =\n %#v\nwant %#v", got, want)
	}
}

// Every option RL.SETRATE parses is in its COMMAND DOCS, and no other.
func TestSetRateOptionsDocumented(t *testing.T) {
	tokens := map[string]bool{}
	var walk func([]Arg)
	walk = func(args []Arg) {
		for _, a := range args {
			if a.Token != "" {
				tokens[a.Token] = true
			}
			walk(a.Args)
		}
	}
	walk(NewTable(Limiters(nil, opts)).Lookup("RL.SETRATE").Args)
	want := append([]string{"LIMIT"}, setRateOptions[:]...)
	for _, o := range want {
		if !tokens[o] {
			t.Errorf("RL.SETRATE's COMMAND DOCS lack %s", o)
		}
	}
	// The value tokens of ALGO and MODE are documented too.
	if n := len(tokens) - len(want) - len(limiter.Algos) - 2; n != 0 {
		t.Errorf("RL.SETRATE's COMMAND DOCS have %d tokens it does not parse: %v", n, tokens)
	}
}

// TestLimiterCommandsDocumented checks the entries of Limiters (RL.*):
// every command and argument is documented in the shape redis-cli reads.
func TestLimiterCommandsDocumented(t *testing.T) {
	cmds := Limiters(nil, opts)
	tab := NewTable(cmds)
	for _, name := range []string{"RL.ACQUIRE", "RL.AVAILABLE", "RL.DEL", "RL.GETRATE", "RL.RELEASE", "RL.RESET", "RL.SETRATE", "CL.THROTTLE", "RL.THROTTLE", "GCRA"} {
		if tab.Lookup(name) == nil {
			t.Errorf("Limiters has no %s", name)
		}
	}
	for _, c := range tab.All() {
		if (c.Handler == nil) == (c.Batch == nil) || c.Summary == "" || c.Group != "ratelimit" || c.KeyPos != 1 || len(c.Flags) == 0 {
			t.Errorf("%s: incomplete entry %+v", c.Name, c)
		}
		if c.Args[0].Type != "key" {
			t.Errorf("%s: first argument %+v, want the key", c.Name, c.Args[0])
		}
		// The arity counts the command name and every required argument.
		required := 1
		for _, a := range c.Args {
			if !a.Optional {
				required++
			}
		}
		if c.Arity != required && c.Arity != -required {
			t.Errorf("%s: arity %d, but %d words are required", c.Name, c.Arity, required)
		}
		checkArgs(t, c.Name, c.Args)
		d := c.Docs()
		if len(d)%2 != 0 || d[0] != "summary" || d[2] != "since" || d[4] != "group" || d[6] != "arguments" {
			t.Errorf("%s: Docs() = %#v", c.Name, d)
		}
	}
	if tab.Lookup("rl.setrate").ArityOK(3) || !tab.Lookup("rl.setrate").ArityOK(4) {
		t.Error("RL.SETRATE must take at least 4 words")
	}
	// Handlers reject bad arguments before they touch the (nil) backend.
	_, err := tab.Lookup("RL.SETRATE").Handler(context.Background(), nil, words("RL.SETRATE k 0 1s"))
	if err == nil || err.Error() != "rate must be a positive integer, got '0'" {
		t.Errorf("RL.SETRATE k 0 1s: %v", err)
	}
	tab.Lookup("RL.ACQUIRE").Batch(context.Background(), nil, [][]string{words("RL.ACQUIRE k 0")}, func(_ int, v any) { err, _ = v.(error) })
	if err == nil || err.Error() != "permits must be a positive integer, got '0'" {
		t.Errorf("RL.ACQUIRE k 0: %v", err)
	}
	_, err = tab.Lookup("RL.RELEASE").Handler(context.Background(), nil, words("RL.RELEASE k x"))
	if err == nil || err.Error() != "permits must be a positive integer, got 'x'" {
		t.Errorf("RL.RELEASE k x: %v", err)
	}
}

func checkArgs(t *testing.T, cmd string, args []Arg) {
	t.Helper()
	for _, a := range args {
		switch a.Type {
		case "key", "integer", "double", "string":
			if len(a.Args) > 0 {
				t.Errorf("%s %s: a %s has no sub-arguments", cmd, a.Name, a.Type)
			}
		case "pure-token":
			if a.Token == "" {
				t.Errorf("%s %s: a pure-token needs its token", cmd, a.Name)
			}
		case "oneof", "block":
			if len(a.Args) == 0 {
				t.Errorf("%s %s: a %s needs sub-arguments", cmd, a.Name, a.Type)
			}
			checkArgs(t, cmd, a.Args)
		default:
			t.Errorf("%s %s: unknown argument type %q", cmd, a.Name, a.Type)
		}
		if a.Name == "" {
			t.Errorf("%s: an argument without a name: %+v", cmd, a)
		}
	}
}
