package verbstest

import (
	"testing"
	"time"
)

// TestPeerProcessParentGone ends the child's request stream without a
// Close, as the parent's death does: the child must exit by itself, with
// an error status.
func TestPeerProcessParentGone(t *testing.T) {
	pp := StartPeerProcess(t, "inproc:peer")
	pp.rp.w.Close()
	select {
	case <-pp.Exited():
	case <-time.After(Timeout):
		t.Fatalf("peer process %d still running %v after its stream ended", pp.Pid(), Timeout)
	}
	if st := pp.child.ProcessState(); st == nil || st.ExitCode() != 1 {
		t.Errorf("peer process exit: %v, want status 1", st)
	}
	if err := pp.Close(); err == nil {
		t.Errorf("Close after the child failed: no error")
	}
}
