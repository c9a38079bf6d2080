package rls

import (
	"fmt"
	"slices"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// node is one level of a domain's descriptors: the entries that may come
// next, and the rate_limit of the entries that lead here.
type node struct {
	exact map[string]*node // key "\x00" value
	wild  []wildcard       // values with '*', the longest literal prefix first
	any   map[string]*node // key without a value: each value its own limit
	limit *Limit

	// prefix is the limiter name of the entries that lead here, when every
	// value on the way is exact ("domain:k=v:k2=v2"); static says it is.
	prefix string
	static bool
}

type wildcard struct {
	key   string
	parts []string // the value split at '*'
	next  *node
}

func newNode(prefix string, static bool) *node {
	return &node{exact: map[string]*node{}, any: map[string]*node{}, prefix: prefix, static: static}
}

// add makes the child of key and value (a duplicate is an error).
func (n *node) add(key, value string) (*node, error) {
	dup := func() error { return fmt.Errorf("duplicate descriptor composite key '%s'", join(n.prefix, key, value)) }
	switch {
	case strings.Contains(value, "*"):
		for _, w := range n.wild {
			if w.key == key && strings.Join(w.parts, "*") == value {
				return nil, dup()
			}
		}
		c := newNode(join(n.prefix, key, value), false)
		n.wild = append(n.wild, wildcard{key: key, parts: strings.Split(value, "*"), next: c})
		// The longest literal prefix first: what a policy's longest
		// matching prefix picks too (see name).
		slices.SortStableFunc(n.wild, func(a, b wildcard) int { return len(b.parts[0]) - len(a.parts[0]) })
		return c, nil
	case value == "":
		if n.any[key] != nil {
			return nil, dup()
		}
		n.any[key] = newNode(join(n.prefix, key, ""), false)
		return n.any[key], nil
	}
	if n.exact[key+"\x00"+value] != nil {
		return nil, dup()
	}
	c := newNode(join(n.prefix, key, value), n.static)
	n.exact[key+"\x00"+value] = c
	return c, nil
}

// name decides how l's limiters are made (Limit.Exact, Limit.Pattern),
// with n the node l belongs to. Names are `<domain>:<key>=<value>...`.
// Under exact values only there is one name: an explicit limiter. Under
// exact values and then one key without a value or with a trailing '*',
// every name starts with the same prefix: a policy of that prefix
// governs them all (a wildcard's longer prefix wins over a bare key's, as
// in matching). Anything else has no common prefix: each name gets an
// explicit limiter on its first use (decide.go).
func (n *node) name(l *Limit) {
	l.path = n.prefix
	if n.static {
		l.Exact = n.prefix
		return
	}
	// n's prefix ends with "k=" plus the wildcard's value: n is static
	// up to its last entry when its parent's prefix is.
	i := strings.LastIndexByte(n.prefix, ':')
	parent, last := n.prefix[:i], n.prefix[i+1:]
	if !strings.Contains(parent, "*") && strings.Count(last, "*") <= 1 && strings.HasSuffix(last, "*") {
		l.Pattern = n.prefix
	}
}

// join is the limiter name prefix of a child: "parent:key=value" (a key
// without a value, each value its own limit, ends in "key=*").
func join(prefix, key, value string) string {
	if value == "" {
		value = "*"
	}
	return prefix + ":" + key + "=" + value
}

// next is the node an entry leads to from n: its exact value first, then
// the first wildcard it matches, then its key without a value (as
// envoyproxy/ratelimit looks them up).
func (n *node) next(key, value string) *node {
	if c := n.exact[key+"\x00"+value]; c != nil {
		return c
	}
	for _, w := range n.wild {
		if w.key == key && wildcardMatch(w.parts, value) {
			return w.next
		}
	}
	return n.any[key]
}

// wildcardMatch reports whether value matches a pattern split at '*' (each
// '*' matches any run of characters).
func wildcardMatch(parts []string, value string) bool {
	if !strings.HasPrefix(value, parts[0]) {
		return false
	}
	value = value[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(value, p)
		if i < 0 {
			return false
		}
		value = value[i+len(p):]
	}
	return strings.HasSuffix(value, last)
}

// Match finds the rate_limit of a descriptor's entries in domain, as
// envoyproxy/ratelimit does: the limit of the node its last entry leads
// to (a limit on the way to a longer descriptor does not apply), or nil.
// name is the limiter name: "<domain>:<key>=<value>..." over every entry.
func (r *Rules) Match(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (l *Limit, name string) {
	n := r.domains[domain]
	for _, e := range entries {
		// A descriptor longer than the config's finds no node: no limit.
		if n = n.nextOrNil(e.GetKey(), e.GetValue()); n == nil {
			return nil, ""
		}
	}
	if n == nil || n.limit == nil {
		return nil, ""
	}
	if n.static {
		return n.limit, n.prefix // the same string, made once
	}
	return n.limit, Name(domain, entries)
}

func (n *node) nextOrNil(key, value string) *node {
	if n == nil {
		return nil
	}
	return n.next(key, value)
}

// Name is the limiter name of a descriptor: "<domain>:<key>=<value>...".
func Name(domain string, entries []*rlv3.RateLimitDescriptor_Entry) string {
	size := len(domain)
	for _, e := range entries {
		size += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte(':')
		b.WriteString(e.GetKey())
		b.WriteByte('=')
		b.WriteString(e.GetValue())
	}
	return b.String()
}
