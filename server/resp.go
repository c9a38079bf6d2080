package server

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/oneline"
)

// appendReply encodes a handler's reply in the client's protocol. redcon
// writes RESP2 only, so both protocols are encoded here and written raw.
func appendReply(b []byte, v any, proto int) []byte {
	switch x := v.(type) {
	case nil:
		if proto == 3 {
			return append(b, "_\r\n"...)
		}
		return append(b, "$-1\r\n"...)
	case error:
		return appendError(b, x)
	case rawFrame:
		return append(b, x...)
	case commands.Status:
		return append(append(append(b, '+'), oneline.Scrub(string(x))...), "\r\n"...)
	case int64:
		return appendPrefixed(b, ':', x)
	case int:
		return appendPrefixed(b, ':', int64(x))
	case bool:
		if proto == 3 {
			if x {
				return append(b, "#t\r\n"...)
			}
			return append(b, "#f\r\n"...)
		}
		if x {
			return append(b, ":1\r\n"...)
		}
		return append(b, ":0\r\n"...)
	case string:
		b = appendPrefixed(b, '$', int64(len(x)))
		return append(append(b, x...), "\r\n"...)
	case []byte:
		b = appendPrefixed(b, '$', int64(len(x)))
		return append(append(b, x...), "\r\n"...)
	case []int64:
		b = appendPrefixed(b, '*', int64(len(x)))
		for _, n := range x {
			b = appendPrefixed(b, ':', n)
		}
		return b
	case []string:
		b = appendPrefixed(b, '*', int64(len(x)))
		for _, e := range x {
			b = appendReply(b, e, proto)
		}
		return b
	case []any:
		b = appendPrefixed(b, '*', int64(len(x)))
		for _, e := range x {
			b = appendReply(b, e, proto)
		}
		return b
	case commands.Map:
		if proto == 3 {
			b = appendPrefixed(b, '%', int64(len(x)/2))
		} else {
			b = appendPrefixed(b, '*', int64(len(x)))
		}
		for _, e := range x {
			b = appendReply(b, e, proto)
		}
		return b
	default:
		return appendError(b, fmt.Errorf("internal error: cannot encode a %T reply", v))
	}
}

func appendPrefixed(b []byte, prefix byte, n int64) []byte {
	b = append(b, prefix)
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
}

// appendError writes an error reply in Redis's style: one line starting
// with an upper-case code ("ERR " unless the message brings its own).
func appendError(b []byte, err error) []byte {
	msg := oneline.Scrub(err.Error())
	if !hasCode(msg) {
		msg = "ERR " + msg
	}
	return append(append(append(b, '-'), msg...), "\r\n"...)
}

// errorCodes are the codes an error message may start with; any other
// message gets "ERR " (a message may well start with an upper-case
// option name, like "SHARDS 4 is more than ...").
var errorCodes = map[string]bool{
	"ERR": true, "NOAUTH": true, "WRONGPASS": true, "NOPROTO": true, "NOPERM": true,
	"WRONGTYPE": true, "BUSY": true, "NOSCRIPT": true, "LOADING": true, "READONLY": true,
	"CLUSTERDOWN": true, "TRYAGAIN": true,
}

func hasCode(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	return errorCodes[code]
}
