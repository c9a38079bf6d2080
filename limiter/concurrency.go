package limiter

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Concurrency is a semaphore with leases (concurrency.lua): at most rate
// permits held at once; a lease not renewed expires after interval.
const Concurrency Algo = "concurrency"

// The ops of concurrency.lua (peek is OpPeek).
const (
	OpLease  Op = "lease"
	OpReturn Op = "return"
	OpRenew  Op = "renew"
	OpCancel Op = "cancel"
)

// LeaseOnlyError is RL.ACQUIRE's (and RL.RELEASE's) answer on a
// concurrency limiter.
type LeaseOnlyError struct{ Name string }

func (e LeaseOnlyError) Error() string {
	return fmt.Sprintf("'%s' is a concurrency limiter: take permits with RL.LEASE and give them back with RL.RETURN", e.Name)
}

// NewLeaseID returns an unguessable lease id for permits on a shard:
// "<shard>.<permits>.<32 hex digits from crypto/rand>".
func NewLeaseID(shard int, permits int64) string {
	return strconv.Itoa(shard) + "." + strconv.FormatInt(permits, 10) + "." + randomHex()
}

// NewTicket returns an unguessable waiter ticket.
func NewTicket() string { return randomHex() }

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+: it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// LeaseShard reads the shard out of a lease id; ok is false when id is not
// one rlproxy could have made.
func LeaseShard(id string) (shard int, ok bool) {
	s, rest, found := strings.Cut(id, ".")
	if !found || len(id) > 64 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	p, random, found2 := strings.Cut(rest, ".")
	if err != nil || n < 0 || n >= MaxShards || !found2 || len(random) != 32 {
		return 0, false
	}
	if _, err := strconv.ParseInt(p, 10, 64); err != nil {
		return 0, false
	}
	return n, true
}

// LeaseArgs builds the ARGV of a lease call. ticket is "" for a call that
// does not wait; ticketTTL is how long its place in the queue lasts
// unless it asks again.
func LeaseArgs(epoch string, permits int64, ttl time.Duration, id, ticket string, ticketTTL time.Duration) []any {
	return []any{string(OpLease), epoch, permits, ttl.Milliseconds(), id, ticket, max(1, ticketTTL.Milliseconds())}
}

// ReturnArgs builds the ARGV of a return call.
func ReturnArgs(epoch, id string) []any { return []any{string(OpReturn), epoch, id} }

// RenewArgs builds the ARGV of a renew call (ttl 0: the limiter's lease TTL).
func RenewArgs(epoch, id string, ttl time.Duration) []any {
	return []any{string(OpRenew), epoch, id, ttl.Milliseconds()}
}

// CancelArgs builds the ARGV of a cancel call: a waiter leaves the queue.
func CancelArgs(epoch, ticket string, permits int64) []any {
	return []any{string(OpCancel), epoch, ticket, permits}
}

// LeaseReply is a decoded concurrency.lua reply.
type LeaseReply struct {
	Status Status
	Epoch  string
	// lease: Granted (-1: more permits than the limit), Free permits
	// afterwards, RetryAfterUs until the earliest lease expires.
	// return / renew: Granted is 1 when the lease was held.
	// peek: Granted is the free permits.
	Granted      int64
	Free         int64
	RetryAfterUs int64
}

// DecodeLease checks and decodes a concurrency.lua reply to op.
func DecodeLease(v any, op Op) (LeaseReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return LeaseReply{}, fmt.Errorf("concurrency script: unexpected reply %T %v", v, v)
	}
	status, err := toInt(arr[0])
	epoch, ok := arr[1].(string)
	if err != nil || !ok {
		return LeaseReply{}, fmt.Errorf("concurrency script: unexpected reply head %v", arr[:2])
	}
	r := LeaseReply{Status: Status(status), Epoch: epoch}
	if r.Status != StatusOK {
		return r, nil
	}
	want := 1
	if op == OpLease {
		want = 3
	}
	if len(arr) != 2+want {
		return LeaseReply{}, fmt.Errorf("concurrency script: %s reply has %d values, want %d", op, len(arr)-2, want)
	}
	f := make([]int64, want)
	for i := range f {
		if f[i], err = toInt(arr[2+i]); err != nil {
			return LeaseReply{}, fmt.Errorf("concurrency script: %s value %d: %w", op, i, err)
		}
	}
	r.Granted = f[0]
	if op == OpLease {
		r.Free, r.RetryAfterUs = f[1], f[2]
	}
	return r, nil
}
