package commands

// Reply values handlers return, encoded by the server in the client's
// protocol (RESP2 or RESP3):
//
//	int64, int        integer
//	string, []byte    bulk string
//	Status            simple string (+OK)
//	[]any, []int64    array
//	Map               map in RESP3, flat array in RESP2
//	nil               null
//	error             error reply
type (
	// Status is a simple-string reply such as OK or PONG.
	Status string
	// Map is a list of key/value pairs (keys at even indexes), kept in order.
	Map []any
)

// OK is the usual acknowledgement.
const OK Status = "OK"
