//go:build linux

package usertest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
)

// recvUntil posts recvs on s into 64 KiB until one fails or ends the
// stream, or want bytes have come (want < 0: no limit), and returns the
// bytes and the last recv's error.
func recvUntil(t *testing.T, s *exs.Socket, q *exs.Queue, want int) ([]byte, error) {
	t.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for want < 0 || len(got) < want {
		n := len(buf)
		if want >= 0 {
			n = min(n, want-len(got))
		}
		if err := s.Recv(q, buf[:n], nil, 0, "peer recv"); err != nil {
			t.Fatal(err)
		}
		ev := wait(t, q, exs.EventRecv, "peer recv")
		got = append(got, buf[:ev.N]...)
		if ev.Err != nil || ev.EOF {
			return got, ev.Err
		}
	}
	return got, nil
}

// TestSendfileUser sends file ranges as a program would: between two
// sends, past the end of the file, from a file closed and truncated after
// the call, and a pipe, which is refused.
func TestSendfileUser(t *testing.T) {
	const size = 3<<20 + 12345
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>11)
	}
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			c, s := connected(t, st, q, af.addr(t), exs.SockStream)
			qs := newQueue(t, st, 4) // the server's recvs
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			// A range in the middle, between two sends.
			c.Send(q, []byte("["), nil, 0, "before")
			if err := c.Sendfile(q, f, 5000, 2<<20, 0, "sendfile"); err != nil {
				t.Fatal(err)
			}
			c.Send(q, []byte("]"), nil, 0, "after")
			got, err := recvUntil(t, s, qs, 2<<20+2)
			want := append(append([]byte("["), data[5000:5000+2<<20]...), ']')
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the peer got %d bytes (%v), want %d", len(got), err, len(want))
			}
			for _, w := range []struct {
				user string
				n    int
			}{{"before", 1}, {"sendfile", 2 << 20}, {"after", 1}} {
				if ev := wait(t, q, exs.EventSend, w.user); ev.Err != nil || ev.N != w.n {
					t.Fatalf("%s: N %d, %v; want %d", w.user, ev.N, ev.Err, w.n)
				}
			}

			// Past the end of the file: a short send, N tells.
			if err := c.Sendfile(q, f, size-100, 1000, 0, "tail"); err != nil {
				t.Fatal(err)
			}
			if ev := wait(t, q, exs.EventSend, "tail"); ev.Err != nil || ev.N != 100 {
				t.Fatalf("tail: N %d, %v; want 100", ev.N, ev.Err)
			}
			if got, _ := recvUntil(t, s, qs, 100); !bytes.Equal(got, data[size-100:]) {
				t.Fatal("tail: bytes differ")
			}

			// Closed and truncated while pending: what the file holds.
			f2, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Sendfile(q, f2, 0, size, 0, "truncated"); err != nil {
				t.Fatal(err)
			}
			f2.Close()
			const cut = 1<<20 + 1<<19
			// Not before the first chunks are read: the sendfile may
			// then have read up to 1 MiB, less than the cut.
			if err := os.Truncate(path, cut); err != nil {
				t.Fatal(err)
			}
			if err := c.Shutdown(q, "shutdown"); err != nil {
				t.Fatal(err)
			}
			got, err = recvUntil(t, s, qs, -1) // to the end of the stream
			if err != nil {
				t.Fatal(err)
			}
			ev := wait(t, q, exs.EventSend, "truncated")
			if ev.Err != nil || ev.N < cut || ev.N > size || ev.N != len(got) || !bytes.Equal(got, data[:ev.N]) {
				t.Fatalf("truncated: N %d, %v; the peer got %d bytes", ev.N, ev.Err, len(got))
			}
			wait(t, q, exs.EventShutdown, "shutdown")

			// A pipe is not a file.
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			defer pw.Close()
			if err := c.Sendfile(q, pr, 0, 10, 0, "pipe"); !errors.Is(err, exs.ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("sendfile of a pipe: %v, want EINVAL", err)
			}
		})
	}
}

// TestCancelSendBytesUser cancels a send the peer cannot take whole: N is
// exactly the bytes the peer's recvs get before ECONNRESET.
func TestCancelSendBytesUser(t *testing.T) {
	big := bytes.Repeat([]byte("abcdefghijklmnop"), 1<<20/16)
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			c, s := connected(t, st, q, af.addr(t), exs.SockStream, exs.WithStreamBuffer(64<<10))
			qs := newQueue(t, st, 4)
			if err := c.Send(q, big, nil, 0, "big"); err != nil {
				t.Fatal(err)
			}
			got, _ := recvUntil(t, s, qs, 30_000) // part of it, while the rest waits
			time.Sleep(20 * time.Millisecond)
			if err := c.CancelOp(q, "big", "cancel"); err != nil {
				t.Fatal(err)
			}
			send := wait(t, q, exs.EventSend, "big")
			if !errors.Is(send.Err, exs.ErrCanceled) {
				t.Fatalf("send: %v, want ECANCELED", send.Err)
			}
			wait(t, q, exs.EventCancel, "cancel")
			rest, err := recvUntil(t, s, qs, -1)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("peer: %v, want ECONNRESET", err)
			}
			all := append(got, rest...)
			if send.N != len(all) || !bytes.Equal(all, big[:len(all)]) || send.N < 30_000 {
				t.Fatalf("canceled send N %d, the peer got %d bytes", send.N, len(all))
			}
		})
	}
}

// TestTimeoutModesUser: the recv timeout once (the recv stays posted)
// and at its end (ETIMEDOUT, the bytes it got, the connection ends).
func TestTimeoutModesUser(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			c, s := connected(t, st, q, af.addr(t), exs.SockStream,
				exs.WithOpTimeout(0, d), exs.WithTimeoutMode(exs.TimeoutEnd))
			if err := c.Send(q, []byte("abc"), nil, 0, "send"); err != nil {
				t.Fatal(err)
			}
			wait(t, q, exs.EventSend, "send")
			buf := make([]byte, 10)
			start := time.Now()
			if err := s.Recv(q, buf, nil, exs.MsgWaitAll, "recv"); err != nil {
				t.Fatal(err)
			}
			ev := wait(t, q, exs.EventRecv, "recv")
			if !errors.Is(ev.Err, syscall.ETIMEDOUT) || ev.N != 3 || string(buf[:3]) != "abc" || time.Since(start) < d {
				t.Fatalf("recv: N %d, %v after %v; want 3, ETIMEDOUT after %v", ev.N, ev.Err, time.Since(start), d)
			}
			if _, err := recvUntil(t, c, q, -1); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("peer after the timeout: %v, want ECONNRESET", err)
			}
			if _, err := st.Socket(exs.SockStream, exs.WithTimeoutMode(9)); !errors.Is(err, exs.ErrInvalid) {
				t.Fatalf("a bad timeout mode: %v", err)
			}
		})
	}
}

// TestAdvertisedRecvGoesDirect checks what Stats tells a user about the
// path of a send, in dynamic mode: once the peer's recv is advertised and
// the ADVERT has reached this end (AdvertsReceived), a send that fits the
// recv goes directly into it, none of its bytes through the stream buffer.
func TestAdvertisedRecvGoesDirect(t *testing.T) {
	const size = 256 << 10
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 16)
			c, s := connected(t, st, q, af.addr(t), exs.SockStream, exs.WithMode(exs.ModeDynamic))
			rbuf, wbuf := make([]byte, size), bytes.Repeat([]byte("advert"), size/6+1)[:size]
			for round := range 4 {
				before := c.Stats()
				if err := s.Recv(q, rbuf, nil, exs.MsgWaitAll, "recv"); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for c.Stats().AdvertsReceived == before.AdvertsReceived {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the recv's ADVERT never reached the sender: %+v", round, c.Stats())
					}
					time.Sleep(100 * time.Microsecond)
				}
				if err := c.Send(q, wbuf, nil, 0, "send"); err != nil {
					t.Fatal(err)
				}
				// The two events come in either order.
				evs := map[any]exs.Event{}
				for range 2 {
					ev, err := next(q)
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					evs[ev.User] = ev
				}
				if ev := evs["recv"]; ev.Type != exs.EventRecv || ev.Err != nil || ev.N != size || !bytes.Equal(rbuf, wbuf) {
					t.Fatalf("round %d: recv %v of %d bytes (%v), content equal %v", round, ev.Type, ev.N, ev.Err, bytes.Equal(rbuf, wbuf))
				}
				if ev := evs["send"]; ev.Type != exs.EventSend || ev.Err != nil || ev.N != size {
					t.Fatalf("round %d: send %v of %d bytes (%v)", round, ev.Type, ev.N, ev.Err)
				}
				after := c.Stats()
				if d, i := after.BytesDirect-before.BytesDirect, after.BytesIndirect-before.BytesIndirect; d != size || i != 0 {
					t.Errorf("round %d: %d bytes direct and %d through the stream buffer, want all %d direct", round, d, i, size)
				}
				clear(rbuf)
			}
		})
	}
}
