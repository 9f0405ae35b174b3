package usertest

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/mreg"
)

// TestVectoredTransfers uses SendMsg and RecvMsg as a program would, over
// every provider: a header built per message and a payload in registered
// memory go out as one send and come back into a header buffer and a
// registered body; on seqpacket sockets a SendMsg is one message; bad
// vectors fail at once and post nothing.
func TestVectoredTransfers(t *testing.T) {
	for _, af := range addrFuncs {
		t.Run(af.name, func(t *testing.T) {
			st := newStack(t)
			q := newQueue(t, st, 32)
			client, server := connected(t, st, q, af.addr(t), exs.SockStream)

			mem, err := st.Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			mh, err := st.Mregister(mem, exs.AccessRead|exs.AccessWrite)
			if err != nil {
				t.Fatal(err)
			}
			payload, body := mem[:300<<10], mem[512<<10:][:300<<10]
			for i := range payload {
				payload[i] = byte(i*7 + i>>9)
			}
			header := []byte("HDR:0000307200;")
			hdrIn := make([]byte, len(header))
			err = server.RecvMsg(q, []exs.IOVec{{Buf: hdrIn}, {}, {Buf: body, MH: mh}}, exs.MsgWaitAll, "recvmsg")
			if err != nil {
				t.Fatal(err)
			}
			err = client.SendMsg(q, []exs.IOVec{{Buf: header}, {Buf: payload, MH: mh}, {Buf: nil}}, 0, "sendmsg")
			if err != nil {
				t.Fatal(err)
			}
			total := len(header) + len(payload)
			got := map[any]exs.Event{}
			for len(got) < 2 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			if ev := got["sendmsg"]; ev.Type != exs.EventSendMsg || ev.N != total || ev.Err != nil {
				t.Errorf("sendmsg: %v n %d %v, want %v n %d", ev.Type, ev.N, ev.Err, exs.EventSendMsg, total)
			}
			if ev := got["recvmsg"]; ev.Type != exs.EventRecvMsg || ev.N != total || ev.Err != nil {
				t.Errorf("recvmsg: %v n %d %v, want %v n %d", ev.Type, ev.N, ev.Err, exs.EventRecvMsg, total)
			}
			if !bytes.Equal(hdrIn, header) || !bytes.Equal(body, payload) {
				t.Errorf("recvmsg: the bytes differ from those sent")
			}

			// Bad vectors: an error at once, and no event.
			for _, bad := range []struct {
				name    string
				iov     []exs.IOVec
				targets []error
			}{
				{"empty vector", nil, []error{exs.ErrInvalid, syscall.EINVAL}},
				{"only empty buffers", []exs.IOVec{{}, {Buf: []byte{}}}, []error{exs.ErrInvalid}},
				{"handle not covering its buffer", []exs.IOVec{{Buf: header}, {Buf: make([]byte, 8), MH: mh}}, []error{exs.ErrInvalid, mreg.ErrBounds}},
				{"too many buffers", make([]exs.IOVec, exs.MaxIOV+1), []error{exs.ErrInvalid}},
			} {
				wantErr(t, "sendmsg, "+bad.name, client.SendMsg(q, bad.iov, 0, bad.name), bad.targets...)
				wantErr(t, "recvmsg, "+bad.name, server.RecvMsg(q, bad.iov, 0, bad.name), bad.targets...)
			}
			if n, k := q.Len(), q.Outstanding(); n != 0 || k != 0 {
				t.Errorf("after the bad vectors: %d events queued, %d to come", n, k)
			}

			// Seqpacket: one SendMsg is one message, for a plain Recv or
			// a RecvMsg; a message longer than the RecvMsg's buffers
			// fails with EMSGSIZE.
			pc, ps := connected(t, st, q, af.addr(t), exs.SockSeqPacket)
			in := make([]byte, 64)
			a, b := make([]byte, 3), make([]byte, 3)
			if err := ps.Recv(q, in, nil, 0, "recv"); err != nil {
				t.Fatal(err)
			}
			if err := ps.RecvMsg(q, []exs.IOVec{{Buf: a}, {Buf: b}}, 0, "short"); err != nil {
				t.Fatal(err)
			}
			if err := pc.SendMsg(q, []exs.IOVec{{Buf: []byte("one ")}, {Buf: []byte("message")}}, 0, "m1"); err != nil {
				t.Fatal(err)
			}
			if err := pc.SendMsg(q, []exs.IOVec{{Buf: []byte("seven")}, {Buf: []byte("!!")}}, 0, "m2"); err != nil {
				t.Fatal(err)
			}
			got = map[any]exs.Event{}
			for len(got) < 4 {
				ev, err := next(q)
				if err != nil {
					t.Fatal(err)
				}
				got[ev.User] = ev
			}
			if ev := got["recv"]; ev.Type != exs.EventRecv || ev.Err != nil || string(in[:ev.N]) != "one message" {
				t.Errorf("recv of a SendMsg: %v %q %v", ev.Type, in[:ev.N], ev.Err)
			}
			if ev := got["short"]; ev.Type != exs.EventRecvMsg || !errors.Is(ev.Err, syscall.EMSGSIZE) {
				t.Errorf("recvmsg of a longer message: %v n %d %v, want EMSGSIZE", ev.Type, ev.N, ev.Err)
			}
			if ev := got["m1"]; ev.Type != exs.EventSendMsg || ev.N != 11 || ev.Err != nil {
				t.Errorf("sendmsg m1: %v n %d %v", ev.Type, ev.N, ev.Err)
			}
			if ev := got["m2"]; ev.Type != exs.EventSendMsg || !errors.Is(ev.Err, syscall.EMSGSIZE) {
				t.Errorf("sendmsg m2: %v n %d %v, want EMSGSIZE", ev.Type, ev.N, ev.Err)
			}
		})
	}
}

// TestManyQueuedSendMsg queues many SendMsg calls of many separate
// buffers, each buffer its own byte, before the peer posts its recv, with
// the default frames and with one: every send completes and the bytes
// arrive in order.
func TestManyQueuedSendMsg(t *testing.T) {
	for _, af := range addrFuncs {
		for _, frames := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/frames=%d", af.name, frames), func(t *testing.T) {
				const sends = 40
				st := newStack(t)
				q := newQueue(t, st, 2*sends)
				opts := []exs.SocketOption{exs.WithOutstanding(sends, 4)}
				if frames > 0 {
					opts = append(opts, exs.WithFrames(frames))
				}
				client, server := connected(t, st, q, af.addr(t), exs.SockStream, opts...)
				var want []byte
				for i := range sends {
					v := make([]exs.IOVec, exs.MaxIOV)
					for j := range v {
						v[j] = exs.IOVec{Buf: []byte{byte(i + j)}}
						want = append(want, byte(i+j))
					}
					if err := client.SendMsg(q, v, 0, i); err != nil {
						t.Fatal(err)
					}
				}
				got := make([]byte, len(want))
				if err := server.Recv(q, got, nil, exs.MsgWaitAll, "recv"); err != nil {
					t.Fatal(err)
				}
				for k := 0; k < sends+1; k++ {
					ev, err := next(q)
					if err != nil {
						t.Fatal(err)
					}
					if ev.Err != nil {
						t.Fatalf("event %v of %v: %v", ev.Type, ev.User, ev.Err)
					}
				}
				if !bytes.Equal(got, want) {
					t.Error("the recv's bytes differ from the sends'")
				}
			})
		}
	}
}
