// A grpc-go client of a dm_env_rpc server (tests/test_interop_go.py).
//
// Runs -runs connections in a row; on each, -streams concurrent streams, each a whole episode:
// CreateWorld, JoinWorld, a first Step, then Steps until the state is no longer RUNNING (or
// -steps of them), LeaveWorld, DestroyWorld. Each Step asks for every observation. Every action tensor is filled with -fill, held
// within the spec's bounds. Prints one JSON line: {"ok", "code", "errors", "streams_ok",
// "steps", "max_obs_bytes", "obs_first", "obs_last",
// "int64_obs"} (the largest uint8 observation's size, first and last byte); code is the first failure's gRPC code.
//
// With -wait, the first stream prints "READY" after its first Step and waits for a line on stdin
// before going on (the test stops, drains or kills the server meanwhile).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"
	_ "unsafe" // go:linkname

	"dmrpcgo/envpb"
	pb "dmrpcgo/pb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpc-go raises a keepalive interval below 10 s to 10 s; its own tests lower this floor to
// send PINGs faster, and so does -keepalive here (an abusive client).
//
//go:linkname keepaliveMinPingTime google.golang.org/grpc/internal.KeepaliveMinPingTime
var keepaliveMinPingTime time.Duration

var (
	streams   = flag.Int("streams", 1, "concurrent streams on one ClientConn")
	runs      = flag.Int("runs", 1, "connections, one after the other")
	maxSteps  = flag.Int("steps", 1000, "most Steps per episode after the first")
	fill      = flag.Int("fill", 1, "value of every action element (within the spec's bounds)")
	pause     = flag.Duration("pause", 0, "idle pause, stream open, after the first Step")
	kaTime    = flag.Duration("keepalive", 0, "client keepalive PING interval (0: off, grpc-go's default)")
	kaTimeout = flag.Duration("keepalive-timeout", time.Second, "wait for a keepalive PING's ACK")
	permit    = flag.Bool("permit-without-stream", false, "keepalive PINGs with no stream open")
	useGzip   = flag.Bool("gzip", false, "compress requests with gzip")
	ca        = flag.String("ca", "", "TLS: trust this certificate (PEM)")
	token     = flag.String("token", "", "send 'authorization: Bearer TOKEN'")
	wait      = flag.Bool("wait", false, "print READY after the first stream's first Step, wait for a stdin line")
	deadline  = flag.Duration("deadline", 30*time.Second, "deadline of each stream")
)

type result struct {
	OK          bool     `json:"ok"`
	Code        uint32   `json:"code"`
	Errors      []string `json:"errors"`
	StreamsOK   int      `json:"streams_ok"`
	Steps       int      `json:"steps"`
	MaxObsBytes int      `json:"max_obs_bytes"`
	ObsFirst    int      `json:"obs_first"`
	ObsLast     int      `json:"obs_last"`
	Int64Obs    int64    `json:"int64_obs"` // the last int64 observation's first element
}

var (
	mu  sync.Mutex
	res = result{OK: true, Errors: []string{}}
)

func fail(err error) {
	mu.Lock()
	defer mu.Unlock()
	if res.OK {
		res.Code = uint32(status.Code(err))
	}
	res.OK = false
	res.Errors = append(res.Errors, err.Error())
}

// bound holds v within the spec's first min/max element, if the spec gives them.
func bound(v float64, spec *pb.TensorSpec) float64 {
	first := func(value *pb.TensorSpec_Value) (float64, bool) {
		var a []float64
		switch p := value.GetPayload().(type) {
		case *pb.TensorSpec_Value_Int8S:
			for _, x := range p.Int8S.Array {
				a = append(a, float64(int8(x)))
			}
		case *pb.TensorSpec_Value_Uint8S:
			for _, x := range p.Uint8S.Array {
				a = append(a, float64(x))
			}
		case *pb.TensorSpec_Value_Int32S:
			for _, x := range p.Int32S.Array {
				a = append(a, float64(x))
			}
		case *pb.TensorSpec_Value_Int64S:
			for _, x := range p.Int64S.Array {
				a = append(a, float64(x))
			}
		case *pb.TensorSpec_Value_Floats:
			for _, x := range p.Floats.Array {
				a = append(a, float64(x))
			}
		case *pb.TensorSpec_Value_Doubles:
			a = p.Doubles.Array
		}
		if len(a) == 0 {
			return 0, false
		}
		return a[0], true
	}
	if lo, ok := first(spec.Min); ok {
		v = math.Max(v, lo)
	}
	if hi, ok := first(spec.Max); ok {
		v = math.Min(v, hi)
	}
	return v
}

// action is a tensor of the spec's dtype and shape, every element v.
func action(spec *pb.TensorSpec, v float64) *pb.Tensor {
	n := 1
	for _, d := range spec.Shape {
		n *= int(d)
	}
	t := &pb.Tensor{Shape: spec.Shape}
	switch spec.Dtype {
	case pb.DataType_INT8, pb.DataType_UINT8:
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(int8(v))
		}
		if spec.Dtype == pb.DataType_INT8 {
			t.Payload = &pb.Tensor_Int8S{Int8S: &pb.Tensor_Int8Array{Array: b}}
		} else {
			t.Payload = &pb.Tensor_Uint8S{Uint8S: &pb.Tensor_Uint8Array{Array: b}}
		}
	case pb.DataType_INT32:
		a := make([]int32, n)
		for i := range a {
			a[i] = int32(v)
		}
		t.Payload = &pb.Tensor_Int32S{Int32S: &pb.Tensor_Int32Array{Array: a}}
	case pb.DataType_INT64:
		a := make([]int64, n)
		for i := range a {
			a[i] = int64(v)
		}
		t.Payload = &pb.Tensor_Int64S{Int64S: &pb.Tensor_Int64Array{Array: a}}
	case pb.DataType_FLOAT:
		a := make([]float32, n)
		for i := range a {
			a[i] = float32(v)
		}
		t.Payload = &pb.Tensor_Floats{Floats: &pb.Tensor_FloatArray{Array: a}}
	case pb.DataType_DOUBLE:
		a := make([]float64, n)
		for i := range a {
			a[i] = v
		}
		t.Payload = &pb.Tensor_Doubles{Doubles: &pb.Tensor_DoubleArray{Array: a}}
	case pb.DataType_BOOL:
		t.Payload = &pb.Tensor_Bools{Bools: &pb.Tensor_BoolArray{Array: make([]bool, n)}}
	}
	return t
}

func episode(ctx context.Context, conn *grpc.ClientConn, first bool) error {
	ctx, cancel := context.WithTimeout(ctx, *deadline)
	defer cancel()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	var callOpts []grpc.CallOption
	if *useGzip {
		callOpts = append(callOpts, grpc.UseCompressor(gzip.Name))
	}
	stream, err := envpb.NewEnvironmentClient(conn).Process(ctx, callOpts...)
	if err != nil {
		return err
	}
	send := func(req *pb.EnvironmentRequest) (*pb.EnvironmentResponse, error) {
		if err := stream.Send(req); err != nil {
			_, err = stream.Recv() // the stream's status says why
			return nil, err
		}
		resp, err := stream.Recv()
		if err == nil && resp.GetError() != nil {
			err = fmt.Errorf("dm_env_rpc error %d: %s", resp.GetError().Code, resp.GetError().Message)
		}
		return resp, err
	}
	steps := 0
	var observations []uint64
	stepOnce := func(actions map[uint64]*pb.Tensor) (*pb.StepResponse, error) {
		resp, err := send(&pb.EnvironmentRequest{Payload: &pb.EnvironmentRequest_Step{Step: &pb.StepRequest{
			Actions: actions, RequestedObservations: observations}}})
		if err != nil {
			return nil, err
		}
		mu.Lock()
		steps++
		res.Steps++
		for _, t := range resp.GetStep().Observations {
			if a := t.GetInt64S(); a != nil && len(a.Array) > 0 {
				res.Int64Obs = a.Array[0]
			}
			if b := t.GetUint8S(); b != nil && len(b.Array) >= res.MaxObsBytes && len(b.Array) > 0 {
				res.MaxObsBytes, res.ObsFirst, res.ObsLast = len(b.Array), int(b.Array[0]), int(b.Array[len(b.Array)-1])
			}
		}
		mu.Unlock()
		return resp.GetStep(), nil
	}

	created, err := send(&pb.EnvironmentRequest{Payload: &pb.EnvironmentRequest_CreateWorld{CreateWorld: &pb.CreateWorldRequest{}}})
	if err != nil {
		return err
	}
	world := created.GetCreateWorld().WorldName
	joined, err := send(&pb.EnvironmentRequest{Payload: &pb.EnvironmentRequest_JoinWorld{JoinWorld: &pb.JoinWorldRequest{WorldName: world}}})
	if err != nil {
		return err
	}
	actions := map[uint64]*pb.Tensor{}
	for uid := range joined.GetJoinWorld().Specs.Observations {
		observations = append(observations, uid)
	}
	for uid, spec := range joined.GetJoinWorld().Specs.Actions {
		actions[uid] = action(spec, bound(float64(*fill), spec))
	}
	if _, err := stepOnce(nil); err != nil { // the episode's first observation
		return err
	}
	if first && *wait {
		fmt.Println("READY")
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	time.Sleep(*pause)
	for i := 0; i < *maxSteps; i++ {
		answer, err := stepOnce(actions)
		if err != nil {
			return err
		}
		if answer.State != pb.EnvironmentStateType_RUNNING {
			break
		}
	}
	for _, req := range []*pb.EnvironmentRequest{
		{Payload: &pb.EnvironmentRequest_LeaveWorld{LeaveWorld: &pb.LeaveWorldRequest{}}},
		{Payload: &pb.EnvironmentRequest_DestroyWorld{DestroyWorld: &pb.DestroyWorldRequest{WorldName: world}}},
	} {
		if _, err := send(req); err != nil {
			return err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after CloseSend: %v", err)
	}
	return nil
}

func main() {
	flag.Parse()
	address := flag.Arg(0)
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}
	if *ca != "" {
		creds, err := credentials.NewClientTLSFromFile(*ca, "")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		opts = append(opts, grpc.WithTransportCredentials(creds))
	} else {
		opts = append(opts, grpc.WithInsecure())
	}
	if *kaTime > 0 {
		keepaliveMinPingTime = *kaTime
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: *kaTime, Timeout: *kaTimeout, PermitWithoutStream: *permit}))
	}
	for run := 0; run < *runs; run++ {
		conn, err := grpc.Dial(address, opts...)
		if err != nil {
			fail(err)
			break
		}
		var group sync.WaitGroup
		for i := 0; i < *streams; i++ {
			group.Add(1)
			go func(first bool) {
				defer group.Done()
				if err := episode(context.Background(), conn, first); err != nil {
					fail(err)
				} else {
					mu.Lock()
					res.StreamsOK++
					mu.Unlock()
				}
			}(run == 0 && i == 0)
		}
		group.Wait()
		conn.Close()
	}
	line, _ := json.Marshal(res)
	fmt.Println(string(line))
}
