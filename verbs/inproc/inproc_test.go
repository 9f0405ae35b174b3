package inproc_test

import (
	"testing"

	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/verbstest"
)

// TestConformance runs the verbs conformance suite against the provider.
func TestConformance(t *testing.T) {
	verbstest.Run(t, func(t *testing.T) verbstest.Env {
		p := inproc.New()
		return verbstest.Env{
			Provider:   p,
			Peer:       verbstest.NewLocalPeer(p, "inproc:peer"),
			ListenAddr: "inproc:local",
		}
	})
}
