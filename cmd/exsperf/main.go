// Command exsperf measures exs and reproduces the experiments of MacArthur
// and Russell, "An Efficient Method for Stream Semantics over RDMA" (IPDPS
// 2014): direct-only, indirect-only and dynamic transfers compared by
// throughput, CPU time and the share of bytes sent directly, over message
// sizes, numbers of outstanding operations and distance. Every run measures
// its anchors beside it: the memory-copy limit (one and two copies of the
// same buffers) and a plain TCP stream over loopback, so that each figure can
// be read against what this machine does anyway.
//
// With no arguments it runs a short comparison on this host:
//
//	go run ./cmd/exsperf
//
// Subcommands: compare (the default), engine, sweep, lat, rate, server and
// client; "exsperf -h" explains each of them and their flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	endProfile, err := startProfile(os.Args[1:])
	if err == nil {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		endProfile()
	}
	stop()
	code := 0
	switch {
	case err == nil:
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "exsperf: %v\nRun 'exsperf -h' for usage.\n", err)
		code = 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "exsperf: interrupted")
		code = 130
	default:
		fmt.Fprintln(os.Stderr, "exsperf:", err)
		code = 1
	}
	os.Exit(code)
}
