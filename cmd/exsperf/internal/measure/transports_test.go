package measure

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
)

// TestTransports streams and bounces messages over each transport that
// runs in this process or starts its own child (tcp-proc), checking every
// byte, and checks that each mode sends the share of bytes directly that it
// names.
func TestTransports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"engine", "exs", "tcp", "tcp-proc"} {
		tr, err := Open(name)
		if err != nil {
			t.Fatal(err)
		}
		modes := Modes
		if name == "tcp" || name == "tcp-proc" {
			modes = modes[:1] // the mode means nothing to TCP
		}
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%v", name, m), func(t *testing.T) {
				p := Params{Mode: m, Size: 3000, Sends: 4, Recvs: 8, Ring: 64 << 10, Verify: true, Seed: 5}
				r, err := Measure(ctx, Point{Run: m.String(), Tr: tr, Params: p}, 2*time.Millisecond, 10*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if !(r.Bytes > 0) || r.Elapsed < 10*time.Millisecond/2 || r.Virtual {
					t.Errorf("stream: %+v", r)
				}
				pct := r.PctDirect()
				switch {
				case name == "tcp" || name == "tcp-proc":
					if r.HasDirect {
						t.Errorf("TCP with direct counts: %+v", r)
					}
				case r.BytesDirect+r.BytesIndirect == 0:
					// The sender issued no transfer between the marks:
					// the receiver took bytes sent before them (seen at a
					// load of 25 on the 2 CPUs). Nothing to judge.
					t.Logf("%v: no transfer issued in the window (%d bytes received)", m, r.Bytes)
				case m == dynproto.DirectOnly && pct != 100, m == dynproto.IndirectOnly && pct != 0, pct < 0:
					t.Errorf("%v: %v%% of bytes directly", m, pct)
				}
				w := WaitBlock
				if name == "engine" {
					w = WaitInline
				}
				p.Wait = w
				rts, err := PingPong(ctx, tr, p, w, time.Millisecond, 5*time.Millisecond)
				if err != nil || len(rts) == 0 {
					t.Errorf("ping-pong: %d round trips, %v", len(rts), err)
				}
			})
		}
		if err := tr.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}

// TestPingPongWaitMode: a pair refuses a ping-pong in a wait mode it was
// not opened for, or that does not apply to it.
func TestPingPongWaitMode(t *testing.T) {
	ctx := context.Background()
	p := Params{Mode: dynproto.Dynamic, Size: 64, Sends: 1, Recvs: 1, Ring: 4096, Wait: WaitBusy}
	for _, c := range []struct {
		tr Transport
		w  WaitMode
	}{{Engine{}, WaitBlock}, {exsTransport{}, WaitBlock}, {&tcpTransport{}, WaitAdaptive}} {
		if rts, err := PingPong(ctx, c.tr, p, c.w, 0, time.Millisecond); err == nil || !strings.Contains(err.Error(), "wait mode") {
			t.Errorf("%s in wait mode %v: %d round trips, %v", c.tr.Name(), c.w, len(rts), err)
		}
	}
}
