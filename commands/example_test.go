package commands_test

import (
	"fmt"

	"github.com/rlproxy/rlproxy/commands"
)

// RL.SETRATE's arguments become a typed request; a bad one becomes one
// line of error (the server adds the "ERR " prefix).
func ExampleParseSetRate() {
	r, err := commands.ParseSetRate([]string{"RL.SETRATE", "api", "100", "1m", "ALGO", "sliding-log", "TTL", "1h"},
		commands.Options{DefaultShards: 1})
	fmt.Println(r.Name, r.Config.Rate, r.Config.Interval, r.Config.Algo, r.Config.Shards, r.Config.TTL, err)

	_, err = commands.ParseSetRate([]string{"RL.SETRATE", "api", "100", "1x"}, commands.Options{DefaultShards: 1})
	fmt.Println(err)
	// Output:
	// api 100 1m0s sliding-log 1 1h0m0s <nil>
	// invalid interval '1x': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)
}

func ExampleParseAcquire() {
	r, _ := commands.ParseAcquire([]string{"RL.ACQUIRE", "api", "3", "TIMEOUT", "1.5s"})
	fmt.Println(r.Name, r.Permits, r.Timeout, r.Block)
	// Output: api 3 1.5s false
}
