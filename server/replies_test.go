package server

import (
	"bytes"
	"testing"
)

// TestFillFrameCopies checks fillFrame's promise that its caller may
// reuse the frame (the gateway hands on frames that view its read
// buffer): a reply that waits behind an earlier one keeps its bytes.
func TestFillFrameCopies(t *testing.T) {
	var out bytes.Buffer
	q := newReplies(&out, func() {})
	first := q.reserve(2, 2, true)
	frame := []byte("$2\r\nhi\r\n")
	q.fillFrame(first+1, frame) // the second reply, before the first
	copy(frame, "$2\r\nXX\r\n")
	q.fillFrame(first, []byte("+OK\r\n"))
	q.write()
	if got, want := out.String(), "+OK\r\n$2\r\nhi\r\n"; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}
