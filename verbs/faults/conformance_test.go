package faults_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/verbstest"
)

// conformance runs the verbs conformance suite over the in-process provider
// wrapped with filters f, both sides of every connection through the
// wrapper: whatever the faults, the provider still keeps every rule of
// verbs.
func conformance(t *testing.T, f faults.Filters) {
	var stats faults.Stats
	verbstest.Run(t, func(t *testing.T) verbstest.Env {
		p := faults.New(inproc.New())
		p.Set(f)
		t.Cleanup(func() {
			s := p.Stats()
			stats.Deferred += s.Deferred
			stats.CompleteLater += s.CompleteLater
			if err := p.Close(); err != nil {
				t.Error(err)
			}
		})
		return verbstest.Env{
			Provider:   p,
			Peer:       verbstest.NewLocalPeer(p, "inproc:peer"),
			ListenAddr: "inproc:local",
		}
	})
	t.Logf("messages held or delayed: %d; outcomes reported late: %d", stats.Deferred, stats.CompleteLater)
}

// TestConformancePassThrough: with no filter the wrapper passes every call
// through.
func TestConformancePassThrough(t *testing.T) {
	conformance(t, faults.Filters{})
}

// TestConformanceLateOutcomes reports every outcome late, from the
// connection end's goroutine, so that the outcomes of a link come in
// another order than its messages (the suite once ran over a wrapper of
// its own that did this: it found the rule that a refused message's outcome
// comes before the termination, and two bugs of the layer that a
// synchronous provider cannot show).
func TestConformanceLateOutcomes(t *testing.T) {
	conformance(t, faults.Filters{Message: func(m *faults.Msg) faults.Fault {
		return faults.Fault{CompleteAfter: time.Duration(rand.IntN(300)) * time.Microsecond}
	}})
}

// TestConformanceDelayed delays some messages (the rest of their link waits
// behind them, the other direction does not) and reports some outcomes
// late.
func TestConformanceDelayed(t *testing.T) {
	conformance(t, faults.Filters{Message: func(m *faults.Msg) faults.Fault {
		var f faults.Fault
		if rand.IntN(3) == 0 {
			f.Delay = time.Duration(rand.IntN(500)) * time.Microsecond
		}
		if rand.IntN(3) == 0 {
			f.CompleteAfter = time.Duration(rand.IntN(200)) * time.Microsecond
		}
		return f
	}})
}
