package dynproto_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/exsgo/exs/dynproto"
)

// TestWritesDone checks WritesDone against as many WriteDone calls: three
// sends gathered into one transfer (three writes, one frame), then n of
// their writes reported done at once.
func TestWritesDone(t *testing.T) {
	done := func(ids ...uint64) []dynproto.Action {
		var out []dynproto.Action
		for _, id := range ids {
			out = append(out, dynproto.Action{Kind: dynproto.SendDone, ID: id, Len: 2})
		}
		return out
	}
	for _, r := range []struct {
		name    string
		n       int
		want    []dynproto.Action
		wantErr bool
	}{
		{name: "none", n: 0},
		{name: "negative", n: -1},
		{name: "two of three", n: 2, want: done(1, 2)},
		{name: "all three", n: 3, want: done(1, 2, 3)},
		{name: "one too many: the three, then ErrProtocol", n: 4, want: done(1, 2, 3), wantErr: true},
	} {
		t.Run(r.name, func(t *testing.T) {
			var ends [2]*dynproto.Engine
			var got [2][]dynproto.Action
			var errs [2]error
			for i := range ends {
				cfg := scenarioConfig()
				cfg.MaxGather = 8
				e, err := dynproto.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				var out []dynproto.Action
				for id := uint64(1); id <= 3; id++ {
					out = e.QueueSend(out, id, 2)
				}
				if out = e.Pump(out); len(out) != 4 {
					t.Fatalf("three gathered sends gave %v, want three writes and a frame", out)
				}
				ends[i] = e
			}
			got[0], errs[0] = ends[0].WritesDone(nil, r.n)
			for range r.n {
				var err error
				if got[1], err = ends[1].WriteDone(got[1]); err != nil {
					errs[1] = err
					break
				}
			}
			if diff := cmp.Diff(r.want, got[0], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("WritesDone(%d) actions (-want +got):\n%s", r.n, diff)
			}
			if diff := cmp.Diff(got[1], got[0], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("WritesDone(%d) against %d WriteDone (-WriteDone +WritesDone):\n%s", r.n, r.n, diff)
			}
			for i, err := range errs {
				if (err != nil) != r.wantErr || err != nil && !errors.Is(err, dynproto.ErrProtocol) {
					t.Errorf("end %d: error %v, want ErrProtocol: %v", i, err, r.wantErr)
				}
			}
			if a, b := ends[0].State(), ends[1].State(); a != b {
				t.Errorf("state after WritesDone %+v, after WriteDone %+v", a, b)
			}
		})
	}
}
