package ratelimit

// Policy is what an acquire answers when a backend it needs is
// unavailable.
type Policy int

const (
	FailWithError Policy = iota // answer the error (the zero value)
	FailOpen                    // grant
	FailClosed                  // deny, retry after 1s
)
