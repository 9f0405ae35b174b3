//go:build linux

package shm_test

import (
	"testing"

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
			Provider:   shm.New(opts...),
			Peer:       verbstest.NewLocalPeer(shm.New(opts...), "shm:"+dir+"/peer"),
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

// TestConformancePoller runs the suite with WithPollerProgress, without
// cross-memory attach on small rings: the suite's polls take the peer's
// messages while the receiver goroutines park, and leave the messages
// that span several records to them.
func TestConformancePoller(t *testing.T) {
	verbstest.Run(t, localEnv(modeOptions("poller-nocma")...))
}
