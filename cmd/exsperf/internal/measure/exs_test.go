package measure

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// TestExsLateSender: a sender that starts only after the receiver ended and
// the stack closed (a loaded machine) is the end of the measurement, not a
// failure; and a receiver whose sender starts late still measures data,
// since its clock starts at the first completion.
func TestExsLateSender(t *testing.T) {
	p := Params{Mode: dynproto.Dynamic, Size: 4096, Sends: 4, Recvs: 8, Ring: 1 << 16}
	t.Run("after close", func(t *testing.T) {
		pr, err := exsTransport{}.Open(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		xp := pr.(*exsPair)
		var stop atomic.Bool
		var sent atomic.Int64
		stop.Store(true)
		xp.st.Close()
		if err := xp.cs.sender(&stop, &sent); err != nil {
			t.Errorf("sender after the stack closed: %v, want nil", err)
		}
		if err := xp.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Run("late start", func(t *testing.T) {
		pr, err := exsTransport{}.Open(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		xp := pr.(*exsPair)
		defer xp.Close()
		var stop atomic.Bool
		var sent atomic.Int64
		serr := make(chan error, 1)
		time.AfterFunc(300*time.Millisecond, func() { serr <- xp.cs.sender(&stop, &sent) })
		var got [2]int64
		win := newWindow(5*time.Millisecond, 0, 20*time.Millisecond)
		rerr := xp.rs.receiver(context.Background(), &win, func(edge int, bytes int64) bool {
			got[edge-1] = bytes
			return edge != edgeEnd
		})
		stop.Store(true)
		xp.st.Close()
		if err := <-serr; err != nil {
			t.Errorf("sender: %v", err)
		}
		if rerr != nil {
			t.Fatalf("receiver: %v", rerr)
		}
		if got[1] <= got[0] {
			t.Errorf("bytes at the edges %d, %d: nothing measured with a late sender", got[0], got[1])
		}
	})
}
