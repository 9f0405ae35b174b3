// Command exsperf measures exs: direct-only, indirect-only and dynamic transfers
// side by side, with anchors (a plain copy) measured in the same run.
//
// With no arguments it runs a short comparison on this host. This first version
// drives the protocol engine over process memory (every direct transfer is one
// copy, every indirect transfer two); socket-level runs over the verbs providers
// are added as the exs package lands.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "exsperf:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exsperf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 300*time.Millisecond, "how long to measure each point")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unknown subcommand %q (see exsperf -h)", fs.Arg(0))
	}
	if *duration <= 0 {
		return fmt.Errorf("-duration must be positive")
	}
	return engineTable(ctx, stdout, *duration)
}
