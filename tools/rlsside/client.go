package main

import (
	"context"
	"fmt"
	"strconv"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The load tool is common to both services, so every CPU µs it spends
// per decision is taken from both on this machine's few cores and
// compresses every ratio. A client is one way of calling; each checks
// every answer (overall code OK, one status per descriptor).
//
//   - stubs: the generated stub, a new request message and a timeout
//     context per call (the tool of record until 2026-11-28).
//   - reuse: the generated stub, requests built once, one context per round.
//   - raw: requests marshalled once and sent as bytes through a codec
//     that does not marshal; the answer is checked from its wire bytes,
//     not decoded into messages.
const (
	clientStubs = "stubs"
	clientReuse = "reuse"
	clientRaw   = "raw"
)

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// caller sends one load's requests through one connection.
type caller interface {
	// call sends the request of value v (0 ≤ v < load.values) and checks
	// the answer: an error when it is not OK for its one descriptor.
	call(ctx context.Context, v int) error
}

// requests are a load's requests, built once: request v is for value v.
func requests(l load) []*pb.RateLimitRequest {
	out := make([]*pb.RateLimitRequest, l.values)
	for v := range out {
		out[v] = &pb.RateLimitRequest{Domain: "bench", Descriptors: descs(l.desc(v))}
	}
	return out
}

// newCaller makes a caller of kind on cc for l's requests (reqs from
// requests(l), shared read-only; raw their wire bytes).
func newCaller(kind string, cc *grpc.ClientConn, l load, reqs []*pb.RateLimitRequest, raw [][]byte) (caller, error) {
	switch kind {
	case clientStubs:
		return stubCaller{c: pb.NewRateLimitServiceClient(cc), l: l}, nil
	case clientReuse:
		return reuseCaller{c: pb.NewRateLimitServiceClient(cc), reqs: reqs}, nil
	case clientRaw:
		return rawCaller{cc: cc, reqs: raw}, nil
	}
	return nil, fmt.Errorf("unknown client %q (stubs, reuse or raw)", kind)
}

type stubCaller struct {
	c pb.RateLimitServiceClient
	l load
}

func (s stubCaller) call(ctx context.Context, v int) error {
	req := &pb.RateLimitRequest{Domain: "bench", Descriptors: descs(s.l.desc(v))}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := s.c.ShouldRateLimit(ctx, req, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	return checkResponse(resp)
}

type reuseCaller struct {
	c    pb.RateLimitServiceClient
	reqs []*pb.RateLimitRequest
}

func (s reuseCaller) call(ctx context.Context, v int) error {
	resp, err := s.c.ShouldRateLimit(ctx, s.reqs[v], grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	return checkResponse(resp)
}

func checkResponse(r *pb.RateLimitResponse) error {
	if r.GetOverallCode() != pb.RateLimitResponse_OK || len(r.GetStatuses()) != 1 || r.GetStatuses()[0].GetCode() != pb.RateLimitResponse_OK {
		return fmt.Errorf("answer not OK for one descriptor: %v", r)
	}
	return nil
}

type rawCaller struct {
	cc   *grpc.ClientConn
	reqs [][]byte
}

// rawReply receives an answer's bytes.
type rawReply struct{ err error }

func (s rawCaller) call(ctx context.Context, v int) error {
	var reply rawReply
	if err := s.cc.Invoke(ctx, shouldRateLimit, s.reqs[v], &reply, grpc.ForceCodecV2(rawCodec{}), grpc.WaitForReady(true)); err != nil {
		return err
	}
	return reply.err
}

// rawCodec sends a request already marshalled ([]byte) and checks a
// RateLimitResponse in its wire form into a *rawReply, without copying
// or decoding it into messages.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot send %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rawReply)
	if !ok {
		return fmt.Errorf("rawCodec: cannot receive into %T", v)
	}
	if len(data) == 1 {
		r.err = checkWire(data[0].ReadOnlyData())
		return nil
	}
	b := data.Materialize()
	r.err = checkWire(b)
	return nil
}

// checkWire checks a RateLimitResponse's bytes: overall_code (field 1)
// OK and exactly one status (field 2) whose code (its field 1) is OK.
func checkWire(b []byte) error {
	overall, statuses := uint64(0), 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("answer: bad wire bytes")
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			overall, n = protowire.ConsumeVarint(b)
		case num == 2 && typ == protowire.BytesType:
			var st []byte
			st, n = protowire.ConsumeBytes(b)
			if n >= 0 && statusCode(st) != uint64(pb.RateLimitResponse_OK) {
				return fmt.Errorf("answer: a descriptor is not OK")
			}
			statuses++
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("answer: bad wire bytes")
		}
		b = b[n:]
	}
	if overall != uint64(pb.RateLimitResponse_OK) || statuses != 1 {
		return fmt.Errorf("answer not OK for one descriptor: overall code %d, %d statuses", overall, statuses)
	}
	return nil
}

// statusCode is a DescriptorStatus's code (field 1) from its bytes.
func statusCode(b []byte) uint64 {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// marshalAll is reqs in wire form.
func marshalAll(reqs []*pb.RateLimitRequest) ([][]byte, error) {
	out := make([][]byte, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// transport is how the load tool dials: default grpc-go options, or
// tuned (bigger buffers and flow-control windows: fewer writes, reads and
// WINDOW_UPDATE frames per call).
func transport(tuned bool) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tuned {
		opts = append(opts, grpc.WithWriteBufferSize(256<<10), grpc.WithReadBufferSize(256<<10),
			grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20))
	}
	return opts
}

// valueName is value v of the 10,000-values load.
func valueName(v int) string { return "user=" + strconv.Itoa(v) }
