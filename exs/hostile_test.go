package exs

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// rawPeer is a hand-driven verbs queue pair that connects to an exs
// listening socket with a valid handshake and may then break the protocol.
type rawPeer struct {
	dev   *verbs.Device
	pd    *verbs.PD
	cq    *verbs.CQ
	qp    *verbs.QP
	mem   []byte // frame receive buffers, a send buffer, a stream buffer
	mr    *verbs.MR
	reply hello
}

const rawFrames = 4

func newRawPeer(t *testing.T, p verbs.Provider, addr string, h hello) (*rawPeer, error) {
	t.Helper()
	r := &rawPeer{}
	var err error
	if r.dev, err = verbs.Open(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.dev.Close() })
	r.pd, _ = r.dev.AllocPD()
	r.cq, _ = r.dev.CreateCQ(64, verbs.CQOptions{})
	if r.qp, err = r.pd.CreateQP(verbs.QPConfig{SendCQ: r.cq, RecvCQ: r.cq}); err != nil {
		t.Fatal(err)
	}
	r.mem = make([]byte, 8192)
	if r.mr, err = r.pd.RegisterMR(r.mem, mreg.LocalWrite|mreg.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	for i := range rawFrames + 1 {
		if err := r.qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{r.mr.SGE(i*dynproto.FrameSize, dynproto.FrameSize)}}); err != nil {
			t.Fatal(err)
		}
	}
	if h.ringSize != 0 {
		h.ringKey, h.ringAddr = uint32(r.mr.RKey()), r.mr.Addr()+4096
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := r.qp.Connect(ctx, addr, h.encode())
	if err != nil {
		return r, err
	}
	if r.reply, err = decodeHello(rep); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

// send posts a SEND of b from the peer's send buffer.
func (r *rawPeer) send(t *testing.T, b []byte) {
	t.Helper()
	copy(r.mem[1024:], b)
	if err := r.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{r.mr.SGE(1024, len(b))}}); err != nil {
		t.Fatal(err)
	}
}

func encodeFrame(f dynproto.Frame) []byte {
	b := make([]byte, dynproto.FrameSize)
	f.Encode(b)
	return b
}

func TestHostilePeer(t *testing.T) {
	good := hello{version: helloVersion, mode: ModeDynamic, typ: SockStream, frames: rawFrames, ringSize: 4096}
	tests := []struct {
		name   string
		attack func(t *testing.T, r *rawPeer)
		errno  syscall.Errno
	}{
		{"malformed frame", func(t *testing.T, r *rawPeer) {
			b := encodeFrame(dynproto.Frame{Type: dynproto.FrameAck})
			b[0] = 0x7f // unknown version and type
			r.send(t, b)
		}, syscall.EPROTO},
		{"short frame", func(t *testing.T, r *rawPeer) {
			r.send(t, []byte("hello"))
		}, syscall.EPROTO},
		{"indirect transfer beyond the stream buffer", func(t *testing.T, r *rawPeer) {
			r.send(t, encodeFrame(dynproto.Frame{Type: dynproto.FrameIndirect, Len: uint32(r.reply.ringSize) + 1}))
		}, syscall.EPROTO},
		{"direct transfer never advertised", func(t *testing.T, r *rawPeer) {
			r.send(t, encodeFrame(dynproto.Frame{Type: dynproto.FrameDirect, Phase: 1, ID: 42, Len: 1}))
		}, syscall.EPROTO},
		{"credits never taken", func(t *testing.T, r *rawPeer) {
			r.send(t, encodeFrame(dynproto.Frame{Type: dynproto.FrameAck, Credits: 1000}))
		}, syscall.EPROTO},
		{"stream buffer space never used", func(t *testing.T, r *rawPeer) {
			r.send(t, encodeFrame(dynproto.Frame{Type: dynproto.FrameAck, Len: 1 << 20}))
		}, syscall.EPROTO},
		{"write with a forged key", func(t *testing.T, r *rawPeer) {
			err := r.qp.PostSend(verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{r.mr.SGE(0, 16)},
				RKey: mreg.Key(r.reply.ringKey ^ 1<<20), RemoteAddr: r.reply.ringAddr})
			if err != nil {
				t.Fatal(err)
			}
		}, syscall.ECONNABORTED},
		{"write beyond the stream buffer", func(t *testing.T, r *rawPeer) {
			err := r.qp.PostSend(verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{r.mr.SGE(0, 16)},
				RKey: mreg.Key(r.reply.ringKey), RemoteAddr: r.reply.ringAddr + uint64(r.reply.ringSize) - 8})
			if err != nil {
				t.Fatal(err)
			}
		}, syscall.ECONNABORTED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := inproc.New()
			st, err := NewStack(WithProvider("inproc", p), WithStreamBuffer(8192))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			q, _ := st.Qcreate(8)
			ln, _ := st.Socket(SockStream)
			if err := ln.Bind("inproc:victim"); err != nil {
				t.Fatal(err)
			}
			if err := ln.Listen(0); err != nil {
				t.Fatal(err)
			}
			if err := ln.Accept(q, "accept"); err != nil {
				t.Fatal(err)
			}
			r, err := newRawPeer(t, p, "inproc:victim", good)
			if err != nil {
				t.Fatal(err)
			}
			ev := dequeueOne(t, q)
			if ev.Type != EventAccept || ev.Err != nil {
				t.Fatalf("accept: %v %v", ev.Type, ev.Err)
			}
			victim := ev.Accepted
			if err := victim.Recv(q, make([]byte, 64), nil, MsgWaitAll, "recv"); err != nil {
				t.Fatal(err)
			}
			tt.attack(t, r)
			ev = dequeueOne(t, q)
			if ev.Type != EventRecv || !errors.Is(ev.Err, tt.errno) || !errors.Is(ev.Err, ErrConnAborted) {
				t.Fatalf("recv after the attack: %v %v, want %v", ev.Type, ev.Err, tt.errno)
			}
			// The peer's queue pair was disconnected.
			select {
			case <-r.qp.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the hostile peer was not disconnected")
			}
			if err := victim.Close(q, "close"); err != nil {
				t.Fatal(err)
			}
			if ev := dequeueOne(t, q); ev.Type != EventClose {
				t.Fatalf("close: %v", ev.Type)
			}
		})
	}
}

func TestHostileHandshake(t *testing.T) {
	p := inproc.New()
	st, err := NewStack(WithProvider("inproc", p))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Qcreate(8)
	ln, _ := st.Socket(SockStream)
	if err := ln.Bind("inproc:picky"); err != nil {
		t.Fatal(err)
	}
	if err := ln.Listen(0); err != nil {
		t.Fatal(err)
	}
	if err := ln.Accept(q, "accept"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		h      hello
		reason rejectReason
	}{
		{"version", hello{version: 2, mode: ModeDynamic, typ: SockStream, frames: 4, ringSize: 4096}, rejectVersion},
		{"mode", hello{version: helloVersion, mode: ModeIndirectOnly, typ: SockStream, frames: 4, ringSize: 4096}, rejectMode},
		{"no frames", hello{version: helloVersion, mode: ModeDynamic, typ: SockStream, ringSize: 4096}, rejectBad},
	}
	for _, tt := range tests {
		_, err := newRawPeer(t, p, "inproc:picky", tt.h)
		var rej *verbs.RejectError
		if !errors.As(err, &rej) {
			t.Fatalf("%s: %v, want a rejection", tt.name, err)
		}
		h, err := decodeHello(rej.PrivateData)
		if err != nil || h.reason != tt.reason {
			t.Errorf("%s: rejection %+v %v, want reason %d", tt.name, h, err, tt.reason)
		}
	}
	// The accept is still posted, and a good request completes it.
	if _, err := newRawPeer(t, p, "inproc:picky", hello{version: helloVersion, mode: ModeDynamic, typ: SockStream, frames: 4, ringSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if ev := dequeueOne(t, q); ev.Type != EventAccept || ev.Err != nil {
		t.Fatalf("accept: %v %v", ev.Type, ev.Err)
	}
}

func dequeueOne(t *testing.T, q *Queue) Event {
	t.Helper()
	var evs [1]Event
	if _, err := q.Dequeue(evs[:], 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return evs[0]
}
