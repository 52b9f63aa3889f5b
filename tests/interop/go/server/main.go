// A grpc-go server of the echo world, for our client (tests/test_interop_go.py).
//
// The echo world: action 1 "act" is an int32 in [0, 9]; observation 1 "obs" is -obs bytes, all
// equal to the last "act" (the echo world of tests/interop_peers.py); with -act N > 0 there is also
// action 2 "blob" (N uint8s), and observation 2 "received" says how many bytes the step's actions
// carried.
//
// Prints "PORT <n>" once listening on 127.0.0.1:0 (or on -unix PATH), then a line per finished stream:
// "STREAM <grpc code> <error or ok>". Reads commands on stdin: "graceful" (GracefulStop: GOAWAY,
// then wait for the open streams), "stop" (Stop: close every connection now); each prints
// "STOPPED" when done. End of stdin is a graceful stop, then exit.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"dmrpcgo/envpb"
	pb "dmrpcgo/pb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // answers gzip requests with gzip
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var (
	obsSize   = flag.Int("obs", 4, "bytes of observation 1")
	actSize   = flag.Int("act", 0, "bytes of action 2 (0: no such action)")
	kaTime    = flag.Duration("keepalive", 0, "server keepalive PING interval (0: grpc-go's default, 2 h)")
	kaTimeout = flag.Duration("keepalive-timeout", 0, "wait for a PING ACK (0: grpc-go's default, 20 s)")
	maxAge    = flag.Duration("max-age", 0, "MaxConnectionAge: GOAWAY a connection this old (0: never, grpc-go's default)")
	ageGrace  = flag.Duration("age-grace", 0, "MaxConnectionAgeGrace: then wait this long for its streams (0: forever)")
	minPing   = flag.Duration("min-ping", 0, "EnforcementPolicy.MinTime (0: grpc-go's default, 5 min)")
	permit    = flag.Bool("permit-without-stream", false, "EnforcementPolicy.PermitWithoutStream")
	cert      = flag.String("cert", "", "TLS certificate (PEM)")
	key       = flag.String("key", "", "TLS key (PEM)")
	token     = flag.String("token", "", "require 'authorization: Bearer TOKEN'")
	streams   = flag.Uint("max-streams", 0, "MaxConcurrentStreams per connection (0: grpc-go's default, unlimited)")
	headers   = flag.Uint("max-header-list", 0, "MaxHeaderListSize (0: grpc-go's default, 16 MiB, not advertised)")
	unix      = flag.String("unix", "", "listen on this Unix socket instead (prints PORT 0)")
)

var out sync.Mutex

func say(format string, args ...interface{}) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

func specs() *pb.ActionObservationSpecs {
	s := &pb.ActionObservationSpecs{
		Observations: map[uint64]*pb.TensorSpec{1: {Name: "obs", Dtype: pb.DataType_UINT8, Shape: []int32{int32(*obsSize)}}},
		Actions: map[uint64]*pb.TensorSpec{1: {
			Name: "act", Dtype: pb.DataType_INT32,
			Min: &pb.TensorSpec_Value{Payload: &pb.TensorSpec_Value_Int32S{Int32S: &pb.Tensor_Int32Array{Array: []int32{0}}}},
			Max: &pb.TensorSpec_Value{Payload: &pb.TensorSpec_Value_Int32S{Int32S: &pb.Tensor_Int32Array{Array: []int32{9}}}},
		}},
	}
	if *actSize > 0 {
		s.Actions[2] = &pb.TensorSpec{Name: "blob", Dtype: pb.DataType_UINT8, Shape: []int32{int32(*actSize)}}
		s.Observations[2] = &pb.TensorSpec{Name: "received", Dtype: pb.DataType_INT64}
	}
	return s
}

func step(req *pb.StepRequest) *pb.StepResponse {
	value, received := byte(0), int64(0)
	for uid, t := range req.Actions {
		if a := t.GetInt32S(); a != nil && uid == 1 && len(a.Array) > 0 {
			value = byte(a.Array[0])
			received += 4 * int64(len(a.Array))
		}
		if a := t.GetUint8S(); a != nil {
			received += int64(len(a.Array))
		}
	}
	obs := make([]byte, *obsSize)
	for i := range obs {
		obs[i] = value
	}
	observations := map[uint64]*pb.Tensor{
		1: {Shape: []int32{int32(*obsSize)}, Payload: &pb.Tensor_Uint8S{Uint8S: &pb.Tensor_Uint8Array{Array: obs}}}}
	if *actSize > 0 {
		observations[2] = &pb.Tensor{Payload: &pb.Tensor_Int64S{Int64S: &pb.Tensor_Int64Array{Array: []int64{received}}}}
	}
	return &pb.StepResponse{State: pb.EnvironmentStateType_RUNNING, Observations: observations}
}

func answer(req *pb.EnvironmentRequest) *pb.EnvironmentResponse {
	switch p := req.Payload.(type) {
	case *pb.EnvironmentRequest_CreateWorld:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_CreateWorld{CreateWorld: &pb.CreateWorldResponse{WorldName: "echo"}}}
	case *pb.EnvironmentRequest_JoinWorld:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_JoinWorld{JoinWorld: &pb.JoinWorldResponse{Specs: specs()}}}
	case *pb.EnvironmentRequest_Reset_:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_Reset_{Reset_: &pb.ResetResponse{Specs: specs()}}}
	case *pb.EnvironmentRequest_Step:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_Step{Step: step(p.Step)}}
	case *pb.EnvironmentRequest_LeaveWorld:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_LeaveWorld{LeaveWorld: &pb.LeaveWorldResponse{}}}
	case *pb.EnvironmentRequest_DestroyWorld:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_DestroyWorld{DestroyWorld: &pb.DestroyWorldResponse{}}}
	case *pb.EnvironmentRequest_ResetWorld:
		return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_ResetWorld{ResetWorld: &pb.ResetWorldResponse{}}}
	}
	return &pb.EnvironmentResponse{Payload: &pb.EnvironmentResponse_Error{Error: &pb.Status{Code: 12, Message: "not served here"}}}
}

type echo struct {
	envpb.UnimplementedEnvironmentServer
}

func (echo) Process(stream envpb.Environment_ProcessServer) (err error) {
	defer func() { say("STREAM %d %v", status.Code(err), err) }()
	if *token != "" {
		md, _ := metadata.FromIncomingContext(stream.Context())
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+*token {
			return status.Error(codes.Unauthenticated, "a token is required")
		}
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(answer(req)); err != nil {
			return err
		}
	}
}

func main() {
	flag.Parse()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: *kaTime, Timeout: *kaTimeout,
			MaxConnectionAge: *maxAge, MaxConnectionAgeGrace: *ageGrace}),
	}
	if *streams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(*streams)))
	}
	if *headers > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(*headers)))
	}
	if *minPing > 0 || *permit {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: *minPing, PermitWithoutStream: *permit}))
	}
	if *cert != "" {
		creds, err := credentials.NewServerTLSFromFile(*cert, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	server := grpc.NewServer(opts...)
	envpb.RegisterEnvironmentServer(server, echo{})
	network, address := "tcp", "127.0.0.1:0"
	if *unix != "" {
		network, address = "unix", *unix
	}
	listener, err := net.Listen(network, address)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	port := 0
	if tcp, ok := listener.Addr().(*net.TCPAddr); ok {
		port = tcp.Port
	}
	say("PORT %d", port)
	served := make(chan struct{})
	go func() { server.Serve(listener); close(served) }()

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		switch lines.Text() {
		case "graceful":
			go func() { server.GracefulStop(); say("STOPPED") }()
		case "stop":
			server.Stop()
			say("STOPPED")
		}
	}
	server.GracefulStop()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
	}
}
