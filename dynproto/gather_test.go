package dynproto_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/dynproto"
)

// TestLimitGather queues small sends before a pump and counts the sends
// each transfer gathers (writes before each frame): MaxGather, then the
// lower limit of LimitGather, which never raises it.
func TestLimitGather(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		limit []int // LimitGather calls before the pump
		want  []int // sends per transfer
	}{
		{"max 32", 32, nil, []int{20}},
		{"limited to 8", 32, []int{8}, []int{8, 8, 4}},
		{"never raised", 4, []int{8}, []int{4, 4, 4, 4, 4}},
		{"zero ignored", 8, []int{0}, []int{8, 8, 4}},
		{"lowest wins", 32, []int{8, 16, 5}, []int{5, 5, 5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := dynproto.New(dynproto.Config{
				Mode: dynproto.IndirectOnly, Type: dynproto.Stream,
				RecvBuffer: 1 << 16, PeerRecvBuffer: 1 << 16, Frames: 64, PeerFrames: 64,
				MaxGather: tc.max,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.limit {
				e.LimitGather(n)
			}
			var acts []dynproto.Action
			for i := range 20 {
				acts = e.QueueSend(acts, uint64(i), 10)
			}
			acts = e.Pump(acts)
			var got []int
			writes := 0
			for _, a := range acts {
				switch a.Kind {
				case dynproto.WriteIndirect:
					writes++
				case dynproto.SendFrame:
					if writes > 0 {
						got = append(got, writes)
					}
					writes = 0
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("sends per transfer (-want +got):\n%s", diff)
			}
		})
	}
}
