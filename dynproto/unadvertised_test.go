package dynproto_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/dynproto"
)

// TestPostRecvUnadvertised checks that a recv posted with
// PostRecvUnadvertised sends no ADVERT, holds back the ADVERTs of the recvs
// after it, and is filled from the stream buffer; and that DirectOnly mode,
// which has no stream buffer, refuses it.
func TestPostRecvUnadvertised(t *testing.T) {
	type post struct {
		n            int
		unadvertised bool
	}
	for _, tt := range []struct {
		name  string
		mode  dynproto.Mode
		posts []post
		want  []string // the actions, as kind and frame type
	}{
		{"advertised", dynproto.Dynamic, []post{{32, false}}, []string{"SendFrame ADVERT"}},
		{"unadvertised", dynproto.Dynamic, []post{{32, true}}, nil},
		{"holds back later recvs", dynproto.Dynamic, []post{{32, true}, {32, false}}, nil},
		{"after an advertised recv", dynproto.Dynamic, []post{{32, false}, {32, true}, {32, false}}, []string{"SendFrame ADVERT"}},
		{"indirect-only", dynproto.IndirectOnly, []post{{32, true}}, nil},
		{"direct-only", dynproto.DirectOnly, []post{{32, true}}, []string{"RecvDone EINVAL"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := scenarioConfig()
			cfg.Mode = tt.mode
			cfg.NoHeldHint = true
			if tt.mode == dynproto.DirectOnly {
				cfg.RecvBuffer, cfg.PeerRecvBuffer, cfg.AckThreshold = 0, 0, 0
			}
			e, err := dynproto.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var acts []dynproto.Action
			for i, p := range tt.posts {
				if p.unadvertised {
					acts = e.PostRecvUnadvertised(acts, uint64(i), p.n, false)
				} else {
					acts = e.PostRecv(acts, uint64(i), p.n, false)
				}
			}
			var got []string
			for _, a := range acts {
				s := a.Kind.String()
				switch {
				case a.Kind == dynproto.SendFrame:
					s += " " + a.Frame.Type.String()
				case errors.Is(a.Err, syscall.EINVAL):
					s += " EINVAL"
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}
