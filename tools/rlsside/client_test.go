package main

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// The raw client checks answers from their wire bytes: it must refuse
// every answer the stubs' check refuses.
func TestCheckWire(t *testing.T) {
	ok := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: 7,
		CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_HOUR}}
	over := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OVER_LIMIT}
	for _, tc := range []struct {
		name string
		resp *pb.RateLimitResponse
		good bool
	}{
		{"ok", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{ok}}, true},
		{"over", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT, Statuses: []*pb.RateLimitResponse_DescriptorStatus{over}}, false},
		{"a status over", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{over}}, false},
		{"no status", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, false},
		{"two statuses", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{ok, ok}}, false},
		{"unknown code", &pb.RateLimitResponse{Statuses: []*pb.RateLimitResponse_DescriptorStatus{ok}}, false},
	} {
		b, err := proto.Marshal(tc.resp)
		if err != nil {
			t.Fatal(err)
		}
		if got, stub := checkWire(b), checkResponse(tc.resp); (got == nil) != tc.good || (stub == nil) != tc.good {
			t.Errorf("%s: checkWire %v, checkResponse %v; want good=%v", tc.name, got, stub, tc.good)
		}
	}
	if checkWire([]byte{0x08}) == nil {
		t.Error("truncated bytes passed")
	}
}
