// Package resp encodes commands in the Redis protocol (RESP) and finds
// where a reply frame ends: the one encoder the gateway, the load tool
// and the test harness share, and the one frame reader.
package resp

import "strconv"

// AppendCommand appends a command as a RESP array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}
