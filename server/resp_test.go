package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rlproxy/rlproxy/commands"
)

func TestAppendReply(t *testing.T) {
	tests := []struct {
		name  string
		v     any
		resp2 string
		resp3 string // resp2 when empty
	}{
		{name: "nil", v: nil, resp2: "$-1\r\n", resp3: "_\r\n"},
		{name: "status", v: commands.OK, resp2: "+OK\r\n"},
		{name: "status PONG", v: commands.Status("PONG"), resp2: "+PONG\r\n"},
		{name: "status with CRLF", v: commands.Status("a\r\nb"), resp2: "+a  b\r\n"},
		{name: "int64", v: int64(-42), resp2: ":-42\r\n"},
		{name: "int64 zero", v: int64(0), resp2: ":0\r\n"},
		{name: "int", v: 7, resp2: ":7\r\n"},
		{name: "true", v: true, resp2: ":1\r\n", resp3: "#t\r\n"},
		{name: "false", v: false, resp2: ":0\r\n", resp3: "#f\r\n"},
		{name: "string", v: "hello", resp2: "$5\r\nhello\r\n"},
		{name: "empty string", v: "", resp2: "$0\r\n\r\n"},
		{name: "binary string", v: "a\r\nb\x00", resp2: "$5\r\na\r\nb\x00\r\n"},
		{name: "bytes", v: []byte("xyz"), resp2: "$3\r\nxyz\r\n"},
		{name: "strings", v: []string{"a", "bc"}, resp2: "*2\r\n$1\r\na\r\n$2\r\nbc\r\n"},
		{name: "empty array", v: []any{}, resp2: "*0\r\n"},
		{name: "nil array", v: []any(nil), resp2: "*0\r\n"},
		{name: "acquire reply", v: []any{int64(1), int64(9), int64(0), int64(100)},
			resp2: "*4\r\n:1\r\n:9\r\n:0\r\n:100\r\n"},
		{name: "nested", v: []any{"a", []any{int64(1), nil, []any{}}, commands.Status("OK"), true},
			resp2: "*4\r\n$1\r\na\r\n*3\r\n:1\r\n$-1\r\n*0\r\n+OK\r\n:1\r\n",
			resp3: "*4\r\n$1\r\na\r\n*3\r\n:1\r\n_\r\n*0\r\n+OK\r\n#t\r\n"},
		{name: "map", v: commands.Map{"rate", int64(10), "algo", "token-bucket"},
			resp2: "*4\r\n$4\r\nrate\r\n:10\r\n$4\r\nalgo\r\n$12\r\ntoken-bucket\r\n",
			resp3: "%2\r\n$4\r\nrate\r\n:10\r\n$4\r\nalgo\r\n$12\r\ntoken-bucket\r\n"},
		{name: "empty map", v: commands.Map{}, resp2: "*0\r\n", resp3: "%0\r\n"},
		{name: "nested map", v: commands.Map{"m", commands.Map{"k", nil}, "l", []any{commands.Map{}}},
			resp2: "*4\r\n$1\r\nm\r\n*2\r\n$1\r\nk\r\n$-1\r\n$1\r\nl\r\n*1\r\n*0\r\n",
			resp3: "%2\r\n$1\r\nm\r\n%1\r\n$1\r\nk\r\n_\r\n$1\r\nl\r\n*1\r\n%0\r\n"},
		{name: "error in array", v: []any{errors.New("bad")}, resp2: "*1\r\n-ERR bad\r\n"},
		{name: "unknown type", v: 1.5, resp2: "-ERR internal error: cannot encode a float64 reply\r\n"},
		{name: "unknown type in array", v: []any{struct{}{}}, resp2: "*1\r\n-ERR internal error: cannot encode a struct {} reply\r\n"},
	}
	for _, tt := range tests {
		want3 := tt.resp3
		if want3 == "" {
			want3 = tt.resp2
		}
		if got := string(appendReply(nil, tt.v, 2)); got != tt.resp2 {
			t.Errorf("%s: RESP2 %q, want %q", tt.name, got, tt.resp2)
		}
		if got := string(appendReply(nil, tt.v, 3)); got != want3 {
			t.Errorf("%s: RESP3 %q, want %q", tt.name, got, want3)
		}
	}
	// appendReply appends.
	if got := string(appendReply([]byte("+A\r\n"), int64(1), 2)); got != "+A\r\n:1\r\n" {
		t.Errorf("appendReply to a buffer: %q", got)
	}
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		msg, want string
	}{
		{"bad thing", "-ERR bad thing\r\n"},
		{"ERR already coded", "-ERR already coded\r\n"},
		{"NOAUTH Authentication required.", "-NOAUTH Authentication required.\r\n"},
		{"WRONGPASS invalid username-password pair or user is disabled.", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"NOPROTO unsupported protocol version", "-NOPROTO unsupported protocol version\r\n"},
		{"NOPERM no", "-NOPERM no\r\n"},
		{"WRONGTYPE Operation against a key", "-WRONGTYPE Operation against a key\r\n"},
		{"NOSCRIPT No matching script", "-NOSCRIPT No matching script\r\n"},
		{"LOADING Redis is loading", "-LOADING Redis is loading\r\n"},
		{"READONLY You can't write", "-READONLY You can't write\r\n"},
		{"BUSY Redis is busy", "-BUSY Redis is busy\r\n"},
		{"CLUSTERDOWN The cluster is down", "-CLUSTERDOWN The cluster is down\r\n"},
		{"TRYAGAIN later", "-TRYAGAIN later\r\n"},
		// Upper-case words that are not codes get ERR.
		{"SHARDS 4 is more than the limiter's 2 permits", "-ERR SHARDS 4 is more than the limiter's 2 permits\r\n"},
		{"BURST applies to token-bucket and leaky-bucket only, not sliding-log", "-ERR BURST applies to token-bucket and leaky-bucket only, not sliding-log\r\n"},
		{"MODE must be OVERALL or PER_CLIENT, got 'x'", "-ERR MODE must be OVERALL or PER_CLIENT, got 'x'\r\n"},
		{"TIMEOUT and BLOCK are not supported yet", "-ERR TIMEOUT and BLOCK are not supported yet\r\n"},
		{"CONFIG SET is not supported", "-ERR CONFIG SET is not supported\r\n"},
		{"NOAUTH", "-NOAUTH\r\n"},
		{"NOAUTHX something", "-ERR NOAUTHX something\r\n"},
		{"noauth lower case", "-ERR noauth lower case\r\n"},
		{"", "-ERR \r\n"},
		// CR and LF never split the reply.
		{"line one\r\nline two", "-ERR line one  line two\r\n"},
		{"WRONGPASS a\nb", "-WRONGPASS a b\r\n"},
		{"\r\n+OK", "-ERR   +OK\r\n"},
	}
	for _, tt := range tests {
		for proto := 2; proto <= 3; proto++ {
			if got := string(appendReply(nil, errors.New(tt.msg), proto)); got != tt.want {
				t.Errorf("RESP%d error %q: %q, want %q", proto, tt.msg, got, tt.want)
			}
		}
	}
	// A wrapped error keeps the code of its outer message.
	wrapped := fmt.Errorf("backend 127.0.0.1:6379: %w", errors.New("NOSCRIPT x"))
	if got := string(appendReply(nil, wrapped, 2)); got != "-ERR backend 127.0.0.1:6379: NOSCRIPT x\r\n" {
		t.Errorf("wrapped error: %q", got)
	}
}

func TestUnknownCommand(t *testing.T) {
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a'
	}
	got := unknownCommand([]string{"FOO", "a", "b"}).Error()
	if want := "unknown command 'FOO', with args beginning with: 'a' 'b' "; got != want {
		t.Errorf("unknownCommand = %q, want %q", got, want)
	}
	if got := unknownCommand([]string{"foo"}).Error(); got != "unknown command 'foo', with args beginning with: " {
		t.Errorf("unknownCommand without args = %q", got)
	}
	many := []string{"X"}
	for i := 0; i < 100; i++ {
		many = append(many, string(long))
	}
	if got := unknownCommand(many).Error(); len(got) > 600 {
		t.Errorf("unknownCommand with 100 long args is %d bytes", len(got))
	}
}
