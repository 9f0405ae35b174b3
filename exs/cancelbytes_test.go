//go:build linux

package exs_test

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// drainPeer posts recvs on s until one fails, and returns the bytes they
// got and the error that ended them.
func drainPeer(t testing.TB, s *exs.Socket, q *exs.Queue) ([]byte, error) {
	t.Helper()
	var got []byte
	buf := make([]byte, 48<<10)
	for {
		if err := s.Recv(q, buf, nil, 0, "peer recv"); err != nil {
			t.Fatal(err)
		}
		ev := waitType(t, q, exs.EventRecv, "peer recv")
		got = append(got, buf[:ev.N]...)
		if ev.Err != nil || ev.EOF {
			return got, ev.Err
		}
	}
}

// cancelHow cancels the client's send "big", by its user value or with
// the whole socket.
var cancelHow = []struct {
	name string
	do   func(s *exs.Socket, q *exs.Queue) error
}{
	{"CancelOp", func(s *exs.Socket, q *exs.Queue) error { return s.CancelOp(q, "big", "cancel") }},
	{"Cancel", func(s *exs.Socket, q *exs.Queue) error { return s.Cancel(q, "cancel") }},
}

// TestCancelSendBytes cancels a send larger than what the peer can take,
// once the peer's recv and stream buffer are full: the send reports in N
// exactly the bytes the peer's recvs then get, before ECONNRESET.
func TestCancelSendBytes(t *testing.T) {
	const size = 1 << 20
	big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, pv := range providers {
		for _, how := range cancelHow {
			for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly} {
				t.Run(pv.name+"/"+how.name+"/"+mode.String(), func(t *testing.T) {
					st := newStack(t)
					p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(mode), exs.WithStreamBuffer(64<<10))
					qc := newQueue(t, st, 16)
					first := make([]byte, 10_000)
					p.server.Recv(p.q, first, nil, 0, "first")
					if err := p.client.Send(qc, big, nil, 0, "big"); err != nil {
						t.Fatal(err)
					}
					ev := waitType(t, p.q, exs.EventRecv, "first")
					got := append([]byte(nil), first[:ev.N]...)
					time.Sleep(10 * time.Millisecond) // the rest fills the stream buffer
					if err := how.do(p.client, qc); err != nil {
						t.Fatal(err)
					}
					send := waitType(t, qc, exs.EventSend, "big")
					if !errors.Is(send.Err, syscall.ECANCELED) {
						t.Fatalf("send: %v, want ECANCELED", send.Err)
					}
					if c := waitType(t, qc, exs.EventCancel, "cancel"); c.Err != nil || c.N != 1 {
						t.Fatalf("cancel: N %d, %v", c.N, c.Err)
					}
					rest, err := drainPeer(t, p.server, p.q)
					if !errors.Is(err, exs.ErrConnReset) {
						t.Fatalf("peer's last recv: %v, want ECONNRESET", err)
					}
					got = append(got, rest...)
					if send.N != len(got) || !bytes.Equal(got, big[:len(got)]) {
						t.Fatalf("canceled send N %d, the peer got %d bytes (a prefix: %v)", send.N, len(got), bytes.Equal(got, big[:len(got)]))
					}
					if send.N < 10_000 || send.N >= size {
						t.Fatalf("canceled send N %d: want the first recv's and at most a stream buffer more", send.N)
					}
					t.Logf("canceled after %d of %d bytes", send.N, size)
				})
			}
		}
	}
}

// TestCancelSendBytesFlowing cancels sends while the peer receives as
// fast as it can, so that frames are in flight when the cancel comes: the
// canceled sends report exactly the bytes the peer got.
func TestCancelSendBytesFlowing(t *testing.T) {
	const size, rounds = 4 << 20, 4
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, pv := range providers {
		for _, how := range cancelHow {
			t.Run(pv.name+"/"+how.name, func(t *testing.T) {
				for round := range rounds {
					st := newStack(t)
					p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithStreamBuffer(256<<10))
					qc := newQueue(t, st, 16)
					// Two sends: the second is canceled whole if the
					// cancel comes during the first.
					p.client.Send(qc, big[:size/2], nil, 0, "big")
					p.client.Send(qc, big[size/2:], nil, 0, "big2")
					var wg sync.WaitGroup
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(time.Duration(round+1) * time.Millisecond)
						if err := how.do(p.client, qc); err != nil && !errors.Is(err, exs.ErrNotFound) {
							t.Error(err)
						}
					}()
					got, err := drainPeer(t, p.server, p.q)
					wg.Wait()
					evs := map[any]exs.Event{}
					for len(evs) < 2 {
						ev := wait(t, qc)
						evs[ev.User] = ev
					}
					n := evs["big"].N + evs["big2"].N
					if !bytes.Equal(got, big[:len(got)]) || n != len(got) {
						t.Fatalf("round %d: sends N %d + %d (%v, %v), the peer got %d bytes (%v)",
							round, evs["big"].N, evs["big2"].N, evs["big"].Err, evs["big2"].Err, len(got), err)
					}
					t.Logf("round %d: the peer got %d of %d bytes, then %v", round, len(got), size, err)
					st.Close()
				}
			})
		}
	}
}

// TestCancelAfterComplete cancels an operation already complete: ENOENT
// at once, nothing posted, the connection goes on.
func TestCancelAfterComplete(t *testing.T) {
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			p := connectAddr(t, st, exs.SockStream, pv.addr(t))
			buf := make([]byte, 8)
			p.server.Recv(p.q, buf, nil, 0, "recv")
			p.client.Send(p.q, []byte("abc"), nil, 0, "send")
			for range 2 {
				if ev := wait(t, p.q); ev.Err != nil {
					t.Fatal(ev.Err)
				}
			}
			for _, c := range []struct {
				s    *exs.Socket
				user string
			}{{p.client, "send"}, {p.server, "recv"}} {
				if err := c.s.CancelOp(p.q, c.user, "cancel"); !errors.Is(err, exs.ErrNotFound) || !errors.Is(err, syscall.ENOENT) {
					t.Errorf("cancel of the completed %s: %v, want ENOENT", c.user, err)
				}
			}
			noEvent(t, p.q)
			p.server.Recv(p.q, buf, nil, 0, "recv2")
			p.client.Send(p.q, []byte("de"), nil, 0, "send2")
			for range 2 {
				if ev := wait(t, p.q); ev.Err != nil {
					t.Fatalf("%v after the cancels: %v", ev.User, ev.Err)
				}
			}
		})
	}
}

// TestCancelThenClose posts a cancel and a close together while bytes
// flow: the cancel's drain does not hold back the close, and every event
// comes.
func TestCancelThenClose(t *testing.T) {
	big := make([]byte, 4<<20)
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			for range 5 {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithStreamBuffer(256<<10))
				qc := newQueue(t, st, 16)
				p.client.Send(qc, big, nil, 0, "big")
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					drainPeer(t, p.server, p.q)
				}()
				time.Sleep(time.Millisecond)
				if err := p.client.CancelOp(qc, "big", "cancel"); err != nil && !errors.Is(err, exs.ErrNotFound) {
					t.Fatal(err)
				}
				if err := p.client.Close(qc, "close"); err != nil {
					t.Fatal(err)
				}
				got := map[any]exs.Event{}
				for got["close"].Type == 0 {
					ev := wait(t, qc)
					got[ev.User] = ev
				}
				wg.Wait()
				if got["big"].Type != exs.EventSend {
					t.Fatalf("no send event before the close: %v", got)
				}
				if n := qc.Outstanding(); n != 0 {
					t.Fatalf("Outstanding after the close = %d", n)
				}
				st.Close()
			}
		})
	}
}

// TestCancelSendfileBytes cancels sendfiles while the peer receives: N is
// the bytes the peer got, a prefix of the file's range.
func TestCancelSendfileBytes(t *testing.T) {
	const size = 8 << 20
	f, data := tempFile(t, size, 3)
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			for round := range 3 {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithStreamBuffer(256<<10))
				qc := newQueue(t, st, 16)
				if err := p.client.Sendfile(qc, f, 1000, size, 0, "big"); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(round+1) * time.Millisecond)
					if err := p.client.Cancel(qc, "cancel"); err != nil {
						t.Error(err)
					}
				}()
				got, err := drainPeer(t, p.server, p.q)
				wg.Wait()
				ev := waitType(t, qc, exs.EventSend, "big")
				if ev.N != len(got) || !bytes.Equal(got, data[1000:1000+len(got)]) {
					t.Fatalf("round %d: sendfile N %d (%v), the peer got %d bytes (%v)", round, ev.N, ev.Err, len(got), err)
				}
				if ev.Err == nil && ev.N != size-1000 {
					t.Fatalf("round %d: sendfile N %d without error", round, ev.N)
				}
				waitType(t, qc, exs.EventCancel, "cancel")
				st.Close()
			}
		})
	}
}

// TestCancelSeqPacketBytes cancels a message that waits for the peer's
// recv: it counts whole or not at all. In the stream buffer (dynamic
// mode) the peer has it whole: N its length, and the peer's next recv
// gets it; waiting for an ADVERT (direct-only) nothing of it went: N 0.
func TestCancelSeqPacketBytes(t *testing.T) {
	for _, pv := range providers {
		for _, tt := range []struct {
			mode  exs.Mode
			wantN int
		}{{exs.ModeDynamic, 6}, {exs.ModeDirectOnly, 0}} {
			t.Run(pv.name+"/"+tt.mode.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockSeqPacket, pv.addr(t), exs.WithMode(tt.mode))
				qc := newQueue(t, st, 16)
				buf := make([]byte, 100)
				p.server.Recv(p.q, buf, nil, 0, "recv")
				p.client.Send(qc, []byte("first"), nil, 0, "first")
				p.client.Send(qc, []byte("second"), nil, 0, "big")
				waitType(t, qc, exs.EventSend, "first")
				if ev := waitType(t, p.q, exs.EventRecv, "recv"); string(buf[:ev.N]) != "first" {
					t.Fatalf("recv %q", buf[:ev.N])
				}
				if tt.mode == exs.ModeDynamic {
					waitUntil(t, "the message in the stream buffer", func() bool { return p.client.Stats().BytesIndirect > 0 })
				}
				noEvent(t, qc) // no recv has taken "second"
				p.client.CancelOp(qc, "big", "cancel")
				if ev := waitType(t, qc, exs.EventSend, "big"); ev.N != tt.wantN || !errors.Is(ev.Err, exs.ErrCanceled) {
					t.Fatalf("canceled message: N %d, %v; want %d", ev.N, ev.Err, tt.wantN)
				}
				waitType(t, qc, exs.EventCancel, "cancel")
				got, err := drainPeer(t, p.server, p.q)
				if want := "second"[:tt.wantN]; string(got) != want || !errors.Is(err, exs.ErrConnReset) {
					t.Fatalf("the peer got %q, %v; want %q, ECONNRESET", got, err, want)
				}
			})
		}
	}
}

// TestCancelSendMsgBytes cancels a vectored send while the peer receives:
// N is the bytes the peer got, across the buffers.
func TestCancelSendMsgBytes(t *testing.T) {
	const piece = 1 << 20
	big := make([]byte, 4*piece)
	for i := range big {
		big[i] = byte(i * 5)
	}
	iov := []exs.IOVec{{Buf: big[:piece]}, {Buf: big[piece : 2*piece]}, {Buf: big[2*piece : 3*piece]}, {Buf: big[3*piece:]}}
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			for round := range 3 {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithStreamBuffer(256<<10))
				qc := newQueue(t, st, 16)
				if err := p.client.SendMsg(qc, iov, 0, "big"); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(round+1) * time.Millisecond)
					if err := p.client.CancelOp(qc, "big", "cancel"); err != nil && !errors.Is(err, exs.ErrNotFound) {
						t.Error(err)
					}
				}()
				got, err := drainPeer(t, p.server, p.q)
				wg.Wait()
				ev := waitType(t, qc, exs.EventSendMsg, "big")
				if ev.N != len(got) || !bytes.Equal(got, big[:len(got)]) {
					t.Fatalf("round %d: SendMsg N %d (%v), the peer got %d bytes (%v)", round, ev.N, ev.Err, len(got), err)
				}
				st.Close()
			}
		})
	}
}
