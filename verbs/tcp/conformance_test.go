//go:build linux

package tcp_test

import (
	"os"
	"testing"

	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/tcp"
	"github.com/exsgo/exs/verbs/verbstest"
)

// modeEnv tells a peer process which provider options to use, so that
// both processes of a test run the same mode.
const modeEnv = "EXS_TCP_TEST_MODE"

// loopback is the address the tests listen at: a port the system picks.
const loopback = "tcp:127.0.0.1:0"

// modeOptions returns the options of a test mode.
func modeOptions(mode string) []tcp.Option {
	switch mode {
	case "nocrc":
		return []tcp.Option{tcp.WithoutCRC()}
	case "small":
		// Segments of 128 bytes: every message of more than 110 bytes
		// takes several FPDUs (the suite's violations, of at most 64
		// bytes, take one: a WRITE is checked segment by segment, so a
		// violation in a later segment leaves the earlier ones placed).
		return []tcp.Option{tcp.WithSegmentSize(128)}
	}
	return nil
}

func TestMain(m *testing.M) {
	netnsMain()
	verbstest.PeerProcessMain(func() verbs.Provider { return tcp.New(modeOptions(os.Getenv(modeEnv))...) })
	os.Exit(m.Run())
}

// localEnv runs both sides in this process, each with its own provider,
// over loopback TCP.
func localEnv(opts ...tcp.Option) func(t *testing.T) verbstest.Env {
	return func(t *testing.T) verbstest.Env {
		p, peer := tcp.New(opts...), tcp.New(opts...)
		t.Cleanup(func() { p.Close() })
		return verbstest.Env{
			Provider:   p,
			Peer:       verbstest.NewLocalPeer(peer, loopback),
			ListenAddr: loopback,
		}
	}
}

// TestConformance runs the suite with the defaults: CRC on, segments as
// large as the connection's MSS allows.
func TestConformance(t *testing.T) {
	verbstest.Run(t, localEnv())
}

// TestConformanceSmallSegments runs the suite with 128-byte segments, so
// that messages take several FPDUs (multi-segment SENDs, WRITEs, READ
// responses).
func TestConformanceSmallSegments(t *testing.T) {
	verbstest.Run(t, localEnv(modeOptions("small")...))
}

// TestConformanceProcess runs the suite with the peer in a child process
// (this test binary, run again), with CRCs off on both sides (the other
// tests run with them on).
func TestConformanceProcess(t *testing.T) {
	for _, mode := range []string{"nocrc"} {
		t.Run(mode, func(t *testing.T) {
			verbstest.Run(t, func(t *testing.T) verbstest.Env {
				p := tcp.New(modeOptions(mode)...)
				t.Cleanup(func() { p.Close() })
				return verbstest.Env{
					Provider:   p,
					Peer:       verbstest.StartPeerProcess(t, loopback, modeEnv+"="+mode),
					ListenAddr: loopback,
				}
			})
		})
	}
}
