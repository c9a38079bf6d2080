package passthrough

import (
	"bufio"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestReadFrame reads frames of every RESP2 and RESP3 type, nested, back
// to back: each comes out byte for byte, and the next starts where it
// ended.
func TestReadFrame(t *testing.T) {
	frames := []string{
		"+OK\r\n", "-ERR bad\r\n", ":42\r\n", "$5\r\nhe\r\no\r\n", "$-1\r\n", "$0\r\n\r\n",
		"*-1\r\n", "*0\r\n", "*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
		"_\r\n", "#t\r\n", ",1.5\r\n", ",inf\r\n", "(3492890328409238509324850943850943825024385\r\n",
		"=15\r\ntxt:Some string\r\n", "!9\r\nSYNTAX xx\r\n",
		"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n~2\r\n:1\r\n:2\r\n",
		">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n",
		"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*1\r\n:2\r\n", // an attribute, then its reply
	}
	r := bufio.NewReader(strings.NewReader(strings.Join(frames, "")))
	for _, want := range frames {
		got, err := readFrame(r)
		if err != nil || string(got) != want {
			t.Fatalf("readFrame = %q, %v; want %q", got, err, want)
		}
	}
	// nextFrame gives the same frames, from its read buffer or not.
	for _, size := range []int{64, 4096} {
		r := bufio.NewReaderSize(strings.NewReader(strings.Join(frames, "")), size)
		for _, want := range frames {
			got, err := nextFrame(r)
			if err != nil || string(got) != want {
				t.Fatalf("buffer %d: nextFrame = %q, %v; want %q", size, got, err, want)
			}
		}
	}
	for _, bad := range []string{"?x\r\n", "$5\r\nab\r\n", "*1\n", "$99999999999999\r\n"} {
		if _, err := readFrame(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("readFrame(%q) took it", bad)
		}
	}
}

// FuzzNextFrame checks that nextFrame, which takes a frame in place when
// its read buffer holds all of it, reads any input as readFrame does:
// the same frames and the same first error.
func FuzzNextFrame(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n:1\r\n", "$5\r\nhe\r\no\r\n$-1\r\n", "*2\r\n$1\r\na\r\n*1\r\n:1\r\n+x\r\n",
		"%1\r\n$1\r\na\r\n:1\r\n", "|1\r\n+a\r\n:1\r\n:2\r\n", "$3\r\nabcd\r\n", "*1\r\n?\r\n", "$-2\r\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		want := bufio.NewReaderSize(strings.NewReader(in), 64)
		got := bufio.NewReaderSize(strings.NewReader(in), 64)
		for {
			w, werr := readFrame(want)
			g, gerr := nextFrame(got)
			if string(w) != string(g) || (werr == nil) != (gerr == nil) {
				t.Fatalf("readFrame = %q, %v; nextFrame = %q, %v", w, werr, g, gerr)
			}
			if werr != nil {
				return
			}
		}
	})
}

// TestCommandOf checks the one table a forwarded call is looked up in
// against the tables it is made of, in either case, and that a known
// command costs no allocation.
func TestCommandOf(t *testing.T) {
	for _, name := range []string{"get", "GET", "Get"} {
		if c := commandOf(name); c.name != "GET" || c.spec == nil || *c.spec != keySpecs["GET"] {
			t.Errorf("commandOf(%q) = %+v", name, c)
		}
	}
	for name := range refused {
		if !commandOf(strings.ToLower(name)).refused {
			t.Errorf("%s: not refused", name)
		}
	}
	for name := range blocking {
		if !commandOf(strings.ToLower(name)).blocking {
			t.Errorf("%s: not blocking", name)
		}
	}
	for name, kind := range unsubscribes {
		if got := commandOf(name).unsub; got != kind {
			t.Errorf("%s: ends %q, want %q", name, got, kind)
		}
	}
	for name := range keyspaceWide {
		if !commandOf(name).noCluster {
			t.Errorf("%s: allowed in cluster mode", name)
		}
	}
	if c := commandOf("eval"); c.movable == nil {
		t.Error("eval: no movable keys")
	}
	if c := commandOf("object"); !c.container {
		t.Error("object: not a container")
	}
	if c := commandOf("fooBar"); c.name != "FOOBAR" || c.refused || c.spec != nil || c.movable != nil {
		t.Errorf("unknown command: %+v", c)
	}
	for _, name := range []string{"get", "SET", "multi", "blpop"} {
		if n := testing.AllocsPerRun(100, func() { commandOf(name) }); n != 0 {
			t.Errorf("commandOf(%q) allocates %v times", name, n)
		}
	}
}

// TestKeysAsRedisFindsThem compares Keys with COMMAND GETKEYS of a real
// redis-server, for commands with fixed key positions and for those
// whose keys move with their arguments.
func TestKeysAsRedisFindsThem(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	for _, args := range [][]string{
		{"GET", "a"}, {"SET", "a", "1", "EX", "10"}, {"MSET", "a", "1", "b", "2"}, {"DEL", "a", "b", "c"},
		{"RENAME", "a", "b"}, {"BLPOP", "a", "b", "0"}, {"BLMOVE", "a", "b", "LEFT", "RIGHT", "0"},
		{"OBJECT", "ENCODING", "a"}, {"XGROUP", "CREATE", "s", "g", "$"}, {"XINFO", "STREAM", "s"},
		{"EVAL", "return 1", "2", "a", "b", "c"}, {"FCALL", "f", "1", "a", "x"},
		{"ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"}, {"ZINTER", "2", "a", "b"},
		{"LMPOP", "2", "a", "b", "LEFT"}, {"BZMPOP", "0", "2", "a", "b", "MIN"}, {"SINTERCARD", "2", "a", "b"},
		{"XREAD", "COUNT", "1", "STREAMS", "a", "b", "0", "0"}, {"XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "0"},
		{"SORT", "a", "BY", "w*", "STORE", "d"}, {"GEORADIUS", "a", "0", "0", "1", "km", "STORE", "d"},
		{"MIGRATE", "h", "1", "", "0", "10", "KEYS", "a", "b"}, {"WATCH", "a", "b"}, {"PFMERGE", "d", "a", "b"},
	} {
		want, err := rdb.Do(ctx, append([]any{"COMMAND", "GETKEYS"}, toAny(args)...)...).StringSlice()
		if err != nil {
			t.Fatalf("COMMAND GETKEYS %v: %v", args, err)
		}
		if got := Keys(args); !reflect.DeepEqual(got, want) {
			t.Errorf("Keys(%q) = %q, Redis finds %q", args, got, want)
		}
	}
	// Every command of the table is one Redis has, with the same key
	// positions.
	info, err := rdb.Command(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range keySpecs {
		if strings.Contains(name, "|") {
			continue
		}
		ci := info[strings.ToLower(name)]
		if ci == nil {
			t.Errorf("%s is in the table but not in Redis's COMMAND INFO", name)
			continue
		}
		if got := (keySpec{int(ci.FirstKeyPos), int(ci.LastKeyPos), int(ci.StepCount)}); got != spec {
			t.Errorf("%s: table %v, Redis %v", name, spec, got)
		}
	}
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// SortPatterns finds the options Redis refuses to a user without access
// to every key, in order: each call is put to Redis as such a user.
func TestSortPatternsAsRedisRefusesThem(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "bound", "on", "nopass", "+@all", "~a", "~d").Err(); err != nil {
		t.Fatal(err)
	}
	bound := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "bound", Password: "x", Protocol: 2})
	t.Cleanup(func() { bound.Close() })
	refused := 0
	for _, args := range [][]string{
		{"SORT", "a"}, {"SORT", "a", "BY", "nosort"}, {"SORT", "a", "BY", "w*"}, {"SORT", "a", "by", "w_*->f", "ALPHA"},
		{"SORT", "a", "GET", "#"}, {"SORT", "a", "GET", "o_*"}, {"SORT", "a", "BY", "nosort", "GET", "#", "GET", "o_*"},
		{"SORT", "a", "LIMIT", "0", "10", "GET", "#"}, {"SORT", "a", "LIMIT", "0", "10", "STORE", "d"},
		{"SORT", "a", "STORE", "d"}, {"SORT", "a", "DESC", "ALPHA", "BY", "w*", "GET", "#"},
		{"SORT_RO", "a", "BY", "w*"}, {"SORT_RO", "a", "GET", "#"}, {"SORT_RO", "a", "ALPHA"},
	} {
		var want string
		err := bound.Do(ctx, toAny(args)...).Err()
		if err != nil && strings.Contains(err.Error(), "option of SORT denied") {
			want = strings.TrimPrefix(err.Error(), "ERR ")
			refused++
		} else if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("%q as a bound user: %v", args, err)
		}
		var got string
		if ps := SortPatterns(args); len(ps) > 0 {
			got = ps[0].Denied()
		}
		if got != want {
			t.Errorf("%q: SortPatterns gives %q, Redis refuses with %q", args, got, want)
		}
	}
	if refused != 9 {
		t.Errorf("Redis refused %d of the calls, want 9: is the user still bound?", refused)
	}
}

// A pattern may reach rlproxy's keys when what comes before its '*' could
// begin one: an element fills the rest.
func TestSortPatternMayReachPrefix(t *testing.T) {
	for p, want := range map[string]bool{
		"*": true, "*->f": true, "r*": true, "rl:*": true, "rl:{api:0}*": true,
		"w_*": false, "w_*->rl:": false, "x*rl:": false, "#": false, "rl:{api:0}:c": false,
	} {
		if got := (SortPattern{"GET", p}).mayReach("rl:"); got != want {
			t.Errorf("pattern %q may reach rl: keys: %v, want %v", p, got, want)
		}
	}
}
