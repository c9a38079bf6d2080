package resp

import "testing"

func TestAppendCommand(t *testing.T) {
	got := string(AppendCommand([]byte("x"), "SET", "k", "", "v\r\n"))
	want := "x*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$3\r\nv\r\n\r\n"
	if got != want {
		t.Fatalf("AppendCommand = %q, want %q", got, want)
	}
	if got := string(AppendCommand(nil)); got != "*0\r\n" {
		t.Fatalf("no arguments: %q", got)
	}
}
