package server

import (
	"math/rand/v2"
	"unsafe"
)

// A big argument of a forwarded command (a 100 MB SET's value) does not
// pass through redcon, which would hold it about three times: its read
// buffer grows by doubling, then it copies the whole command. The guard
// takes the argument's bytes out of the stream into one buffer of the
// announced size (as Redis does for an argument of 32 KiB or more) and
// hands redcon a 4-byte marker in its place; before the command runs the
// marker is swapped back for the value (a view of that buffer), and the
// gateway writes it to Redis from there. One copy in all.
const bigArgMin = 1 << 20

// bigArg is an argument taken out of the stream.
type bigArg struct {
	mark string // what redcon got in its place
	body []byte // the argument, filled as it is read
	got  int
}

// markerHeader is what a taken argument's header ("$104857600\r\n", at
// least 10 bytes for bigArgMin or more) becomes, followed by the marker;
// the argument's own CRLF follows as sent.
const markerHeader = "$4\r\n"

// take starts taking out an argument of n bytes whose header is b[from:to]
// and returns b with the header replaced by the marker's.
func (c *guardedConn) take(b []byte, from, to int, n int64) []byte {
	var m [4]byte
	for i := range m {
		// Random, so that a client's own 4-byte argument is never taken
		// for one (and if one ever were, only its own value would move).
		m[i] = byte(rand.Uint32())
	}
	c.bigs = append(c.bigs, bigArg{mark: string(m[:]), body: make([]byte, n)})
	c.taking = true
	k := copy(b[from:], markerHeader)
	k += copy(b[from+k:], m[:])
	return append(b[:from+k], b[to:]...)
}

// fill moves the argument's bytes b[i:i+n] into the argument being taken
// and returns b without them.
func (c *guardedConn) fill(b []byte, i, n int) []byte {
	a := &c.bigs[len(c.bigs)-1]
	a.got += copy(a.body[a.got:], b[i:i+n])
	return append(b[:i], b[i+n:]...)
}

// restore swaps the markers in the commands just read (in order) back
// for the arguments taken out in their place. It runs on the
// connection's goroutine, as the guard's reads do.
func (c *guardedConn) restore(calls [][]string) {
	for _, args := range calls {
		for j := 1; j < len(args) && len(c.bigs) > 0; j++ {
			if a := c.bigs[0]; args[j] == a.mark && a.got == len(a.body) {
				args[j] = unsafe.String(unsafe.SliceData(a.body), len(a.body))
				c.bigs[0] = bigArg{}
				c.bigs = c.bigs[1:]
			}
		}
	}
}
