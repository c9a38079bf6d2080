package server

import (
	"errors"
	"math"
	"strings"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/resp"
)

// CLIENT REPLY ON|OFF|SKIP, as Redis's networking.c: OFF drops every
// reply until ON; SKIP drops the next command's. Replies of rlproxy's own
// commands and forwarded ones are dropped alike (their slot in the reply
// queue is muted); Pub/Sub confirmations and messages still go out, as
// Redis sends them with CLIENT_PUSHING. The state lives on the client and
// is read and changed only by its reader goroutine (handle), in command
// order.
type replyMode struct {
	off      bool // CLIENT REPLY OFF
	skip     bool // the command being run is skipped
	skipNext bool // CLIENT REPLY SKIP ran: the next command is skipped
}

// errReplyInMulti refuses CLIENT REPLY inside MULTI: queued on the
// backend, it would silence rlproxy's own backend connection.
var errReplyInMulti = errors.New("CLIENT REPLY is not allowed inside MULTI")

func (s *Server) clientReply(c *client, args []string) (any, error) {
	if c.inSession(Session.InMulti) {
		s.session(c).Abort()
		return nil, errReplyInMulti
	}
	switch strings.ToUpper(args[2]) {
	case "ON":
		c.reply.off, c.reply.skip = false, false
		return commands.OK, nil
	case "OFF":
		c.reply.off = true
	case "SKIP":
		if !c.reply.off {
			c.reply.skipNext = true
		}
	default:
		return nil, errors.New("syntax error")
	}
	return rawFrame(nil), nil // no reply (nothing is written)
}

// muted reports whether the reply of the call just run (or sent on) is
// dropped, and moves a SKIP on to the next call, as Redis's resetClient
// does after every command.
func (c *client) muted(args []string) bool {
	m := (c.reply.off || c.reply.skip) && !pubsubCall(args)
	c.reply.skip, c.reply.skipNext = c.reply.skipNext, false
	return m
}

// pubsubCall reports whether a call's replies are Pub/Sub confirmations,
// which CLIENT REPLY does not silence.
func pubsubCall(args []string) bool {
	switch strings.ToUpper(args[0]) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		return true
	}
	return false
}

// mute marks the reply slots reserved for calls (from seq on) whose
// replies are dropped.
func (c *client) mute(seq uint64, calls [][]string) {
	for k, args := range calls {
		if c.muted(args) {
			c.replies.mute(seq + uint64(k))
		}
	}
}

// pushesBefore returns what comes before the last frame of a forwarded
// reply: the pushes Redis sent ahead of it (a RESP3 client's PUBLISH to
// its own channel gets the message first), which a muted reply keeps.
func pushesBefore(frame []byte) []byte {
	n := 0
	for {
		m := resp.FrameIn(frame[n:], math.MaxInt64)
		if m == 0 || n+m >= len(frame) {
			return frame[:n]
		}
		n += m
	}
}
