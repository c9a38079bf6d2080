// Package resp encodes commands in the Redis protocol (RESP) and finds
// where a reply frame ends: the one encoder the gateway, the load tool
// and the test harness share, and the one frame reader.
package resp

import (
	"net"
	"strconv"
	"unsafe"
)

// AppendCommand appends a command as a RESP array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = appendHeader(b, '*', len(args))
	for _, a := range args {
		b = appendHeader(b, '$', len(a))
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// appendHeader appends an array's or a bulk string's header: "*3\r\n", "$5\r\n".
func appendHeader(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n"...)
}

// AppendCommandViews is AppendCommand for a command that may hold big
// arguments: an argument of min bytes or more is not copied. The bytes
// encoded before it move to parts, then a view of the argument itself
// (read-only: it is the caller's string), and encoding goes on in a new
// b. Writing parts and then b (net.Buffers.WriteTo) sends the command.
func AppendCommandViews(parts net.Buffers, b []byte, min int, args ...string) (net.Buffers, []byte) {
	b = appendHeader(b, '*', len(args))
	for _, a := range args {
		b = appendHeader(b, '$', len(a))
		if len(a) >= min && len(a) > 0 {
			parts = append(parts, b, unsafe.Slice(unsafe.StringData(a), len(a)))
			b = nil
		} else {
			b = append(b, a...)
		}
		b = append(b, "\r\n"...)
	}
	return parts, b
}
