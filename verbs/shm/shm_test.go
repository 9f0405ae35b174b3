//go:build linux

package shm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/verbstest"
)

// sockDir returns a short directory for sockets: a Unix-socket path is
// limited to 107 bytes, and t.TempDir's names can be long.
func sockDir(t testing.TB) string {
	t.Helper()
	dir, err := osMkdirTemp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { osRemoveAll(dir) })
	return dir
}

// localEnv runs both sides in this process, each with its own provider,
// over a Unix socket: the same code as between processes
// (process_vm_writev into one's own pid works).
func localEnv(opts ...shm.Option) func(t *testing.T) verbstest.Env {
	return func(t *testing.T) verbstest.Env {
		dir := sockDir(t)
		return verbstest.Env{
			Provider:   newProvider(opts...),
			Peer:       verbstest.NewLocalPeer(newProvider(opts...), "shm:"+dir+"/peer"),
			ListenAddr: "shm:" + dir + "/local",
		}
	}
}

// TestConformance runs the suite with the defaults: one-sided operations
// by cross-memory attach when nothing is in flight.
func TestConformance(t *testing.T) {
	verbstest.Run(t, localEnv())
}

// TestConformanceDirect does every RDMA WRITE and READ with nothing in
// flight before it on the initiator's side, by cross-memory attach, so
// that its checks against the peer's published registrations face the
// suite's violations (guard bytes included).
func TestConformanceDirect(t *testing.T) {
	verbstest.Run(t, localEnv(shm.WithDirectMin(0)))
}

// TestConformanceRing sends every message through the rings, with
// payloads up to 16 KiB inline and larger ones read by the target.
func TestConformanceRing(t *testing.T) {
	verbstest.Run(t, localEnv(shm.WithDirectMin(verbs.MaxMessage+1)))
}

// TestConformanceNoCMA runs the fallback: cross-memory attach refused,
// every byte inline through small rings (so that large messages take
// several records).
func TestConformanceNoCMA(t *testing.T) {
	verbstest.Run(t, localEnv(shm.WithoutCMA(), shm.WithRingSizes(16<<10, 16<<10)))
}

// TestOptionsInvalid checks that every option refuses a value out of its
// range, so that New fails instead of using another value.
func TestOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []shm.Option
	}{
		{"InlineMax", []shm.Option{shm.WithInlineMax(-1)}},
		{"DirectMin", []shm.Option{shm.WithDirectMin(-1)}},
		{"Spin", []shm.Option{shm.WithSpin(-time.Nanosecond)}},
		{"RequestRing", []shm.Option{shm.WithRingSizes(16<<10+1, 16<<10)}},
		{"RequestRingNegative", []shm.Option{shm.WithRingSizes(-1, 16<<10)}},
		{"ResponseRingSmall", []shm.Option{shm.WithRingSizes(16<<10, 8<<10)}},
		{"ResponseRingLarge", []shm.Option{shm.WithRingSizes(16<<10, 128<<20)}},
		{"PeerArenaLimit", []shm.Option{shm.WithPeerArenaLimit(-1)}},
		{"AllowUIDsNegative", []shm.Option{shm.WithAllowUIDs(1000, -1)}},
		{"PeerCheckNil", []shm.Option{shm.WithPeerCheck(nil)}},
		{"PeerCheckAndAllowUIDs", []shm.Option{shm.WithAllowUIDs(1000),
			shm.WithPeerCheck(func(verbs.Cred) error { return nil })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := shm.New(tc.opts...)
			if !errors.Is(err, verbs.ErrInvalid) || p != nil {
				t.Errorf("New = %v, %v; want nil and an error wrapping ErrInvalid", p, err)
			}
		})
	}
	if _, err := shm.New(shm.WithRingSizes(16<<10, 64<<20), shm.WithSpin(0), shm.WithPeerArenaLimit(0)); err != nil {
		t.Errorf("New with values at the ends of their ranges: %v", err)
	}
}
