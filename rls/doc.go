// Package rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on the
// limiters of package ratelimit, so rlproxy replaces envoyproxy/ratelimit
// on the same config files.
//
// rules.go loads envoyproxy/ratelimit's YAML into a tree of rules (with
// each bad key's file and line); match.go finds a descriptor's rule and
// names its limiter (`<domain>:<key>=<value>[:<key>=<value>...]`, so RL.*
// commands reach the same state); decide.go decides a request's
// descriptors together, all or nothing, through a Decider; service.go is
// the gRPC service that builds the reply (codes, limits, headers) and
// counts requests.
package rls
