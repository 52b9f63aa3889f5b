// A grpc-go health-checking client (grpc.health.v1, the package grpc-go ships) of our server
// (tests/test_interop_go.py).
//
// Without -watch: one Check of -service; prints "STATUS <ServingStatus>" or "ERROR <code> <message>".
// With -watch N: a Watch of -service; prints "STATUS <ServingStatus>" for each of the first N
// answers (after the first it prints "WATCHING" and, with -wait, waits for a line on stdin: the
// test changes the server's health meanwhile), then "ERROR <code> <message>" if the stream ends first.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var (
	service  = flag.String("service", "", "the service asked about")
	watch    = flag.Int("watch", 0, "Watch, and print this many answers (0: one Check)")
	wait     = flag.Bool("wait", false, "with -watch: after the first answer print WATCHING and wait for a stdin line")
	ca       = flag.String("ca", "", "TLS: trust this certificate (PEM)")
	token    = flag.String("token", "", "send 'authorization: Bearer TOKEN'")
	deadline = flag.Duration("deadline", 30*time.Second, "deadline of the call")
)

func failed(err error) {
	s, _ := status.FromError(err)
	fmt.Printf("ERROR %d %s\n", s.Code(), s.Message())
}

func main() {
	flag.Parse()
	opts := []grpc.DialOption{grpc.WithInsecure()}
	if *ca != "" {
		creds, err := credentials.NewClientTLSFromFile(*ca, "")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	}
	conn, err := grpc.Dial(flag.Arg(0), opts...)
	if err != nil {
		failed(err)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	client := healthpb.NewHealthClient(conn)
	request := &healthpb.HealthCheckRequest{Service: *service}
	if *watch == 0 {
		answer, err := client.Check(ctx, request)
		if err != nil {
			failed(err)
			return
		}
		fmt.Printf("STATUS %s\n", answer.Status)
		return
	}
	stream, err := client.Watch(ctx, request)
	if err != nil {
		failed(err)
		return
	}
	for i := 0; i < *watch; i++ {
		answer, err := stream.Recv()
		if err != nil {
			failed(err)
			return
		}
		fmt.Printf("STATUS %s\n", answer.Status)
		if i == 0 && *wait {
			fmt.Println("WATCHING")
			bufio.NewReader(os.Stdin).ReadString('\n')
		}
	}
}
