package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// The floor: a gRPC server that answers every ShouldRateLimit OK at once,
// touching no Redis. Measured beside the services, it is the most this
// load tool and a grpc-go server get through on this machine: what no
// rate limit service can exceed here, whatever it saves.

// okServer answers OK to every descriptor.
type okServer struct {
	pb.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(_ context.Context, r *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for range r.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK})
	}
	return resp, nil
}

// serveFloor serves okServer on addr until killed (rlsside floor ADDR).
func serveFloor(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(g, okServer{})
	return g.Serve(ln)
}

// startFloor runs this binary's floor server as a process of its own, so
// its CPU is counted apart from the load tool's.
func startFloor() (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort())
	cmd := exec.Command(self, "floor", addr)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("floor server: %w", err)
	}
	return &proc{cmd: cmd, addr: addr}, nil
}
