package measure

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	if os.Getenv(PeerEnv) == "1" {
		// Re-executed as a peer by startExsProc or procTransport.
		switch os.Getenv(fakePeerEnv) {
		case "silent":
			time.Sleep(time.Minute)
			os.Exit(0)
		case "exit":
			os.Exit(3)
		case "chatty":
			os.Exit(chattyPeer())
		}
		if len(os.Args) > 1 && os.Args[1] == "neighbour" {
			Spin(os.Stdout)
			os.Exit(0)
		}
		if err := testPeer(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testPeer is the peer this test binary is as a child: what exsperf's
// hidden "peer" subcommand is, for the arguments the transports give it
// (--listen ADDR --procs N, or --cc CC).
func testPeer(stdout io.Writer) error {
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	listen := fs.String("listen", "", "")
	cc := fs.String("cc", "", "")
	procs := fs.Int("procs", 0, "")
	if len(os.Args) < 2 || os.Args[1] != "peer" {
		return fmt.Errorf("arguments %q: want peer [flags]", os.Args[1:])
	}
	if err := fs.Parse(os.Args[2:]); err != nil {
		return err
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	ctx := context.Background()
	if addr, ok := ExsAddr(*listen); ok {
		s, err := ListenExs(addr, zap.NewNop())
		if err != nil {
			return err
		}
		return ServeAsPeer(ctx, s, true, stdout)
	}
	s, err := ListenTCP(ctx, TCPAddr{Host: "127.0.0.1:0"}, *cc, zap.NewNop())
	if err != nil {
		return err
	}
	return ServeAsPeer(ctx, s, false, stdout)
}
