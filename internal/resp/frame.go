package resp

import (
	"bytes"
	"strconv"
)

// FrameIn returns the length of the RESP2 or RESP3 frame at the start of
// b when b holds all of it and it is well formed (no length above max),
// else 0. An attribute ('|') is part of the frame that follows it.
func FrameIn(b []byte, max int64) int {
	i := 0
	for pending := 1; pending > 0; pending-- {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 2 || b[i+j-1] != '\r' {
			return 0
		}
		line := b[i : i+j+1]
		i += j + 1
		switch line[0] {
		case '+', '-', ':', ',', '#', '_', '(':
		case '$', '=', '!':
			n, ok := length(line, max)
			switch {
			case !ok:
				return 0
			case n < 0:
				continue
			case int64(len(b)-i) < n+2 || b[i+int(n)] != '\r' || b[i+int(n)+1] != '\n':
				return 0
			}
			i += int(n) + 2
		case '*', '~', '>', '%', '|':
			n, ok := length(line, max)
			if !ok {
				return 0
			}
			if line[0] == '%' || line[0] == '|' {
				n *= 2
			}
			if line[0] == '|' {
				n++
			}
			if n > 0 {
				pending += int(n)
			}
		default:
			return 0
		}
	}
	return i
}

// length reads the length of a header line ("$5\r\n", "*-1\r\n").
func length(line []byte, max int64) (int64, bool) {
	n, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
	return n, err == nil && n >= -1 && n <= max
}
