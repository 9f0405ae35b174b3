package exs_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

// The tests of SendMsg and RecvMsg run over each provider of providers
// (in-process and same-host).

func forProviders(t *testing.T, f func(t *testing.T, addr func(testing.TB) string)) {
	for _, pr := range providers {
		t.Run(pr.name, func(t *testing.T) { f(t, pr.addr) })
	}
}

// iov builds a vector of buffers without handles.
func iov(bufs ...[]byte) []exs.IOVec {
	v := make([]exs.IOVec, len(bufs))
	for i, b := range bufs {
		v[i].Buf = b
	}
	return v
}

func TestVecBadInput(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		st := newStack(t)
		p := connectAddr(t, st, exs.SockStream, addr(t))
		ps := connectAddr(t, st, exs.SockSeqPacket, addr(t))
		pd := connectAddr(t, st, exs.SockStream, addr(t), exs.WithMode(exs.ModeDirectOnly))
		mem := make([]byte, 4096)
		rw, err := st.Mregister(mem[:1024], exs.AccessRead|exs.AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		ro, err := st.Mregister(mem[2048:3072], exs.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		tooMany := make([]exs.IOVec, exs.MaxIOV+1)
		for i := range tooMany {
			tooMany[i].Buf = make([]byte, 1)
		}
		maxOK := tooMany[:exs.MaxIOV]
		empties := iov(nil, []byte{}, nil)
		for _, tt := range []struct {
			name  string
			s     *exs.Socket
			recv  bool
			iov   []exs.IOVec
			flags exs.Flags
			want  []error // nil: the call succeeds
		}{
			{name: "send empty vector", s: p.client, want: []error{exs.ErrInvalid, syscall.EINVAL}},
			{name: "recv empty vector", s: p.server, recv: true, iov: []exs.IOVec{}, want: []error{exs.ErrInvalid}},
			{name: "send too many", s: p.client, iov: tooMany, want: []error{exs.ErrInvalid}},
			{name: "recv too many", s: p.server, recv: true, iov: tooMany, want: []error{exs.ErrInvalid}},
			{name: "send empty buffers on a stream", s: p.client, iov: empties, want: []error{exs.ErrInvalid}},
			{name: "recv empty buffers on a stream", s: p.server, recv: true, iov: empties, want: []error{exs.ErrInvalid}},
			{name: "recv empty buffers on seqpacket", s: ps.server, recv: true, iov: empties, want: []error{exs.ErrInvalid}},
			{name: "handle not covering its buffer", s: p.client, iov: []exs.IOVec{{Buf: mem[:10]}, {Buf: mem[1000:1100], MH: rw}}, want: []error{exs.ErrInvalid, mreg.ErrBounds}},
			{name: "recv handle of another buffer", s: p.server, recv: true, iov: []exs.IOVec{{Buf: mem[3000:3100], MH: rw}}, want: []error{exs.ErrInvalid, mreg.ErrBounds}},
			{name: "recv into a read-only handle", s: p.server, recv: true, iov: []exs.IOVec{{Buf: mem[:10], MH: rw}, {Buf: mem[2048:2100], MH: ro}}, want: []error{exs.ErrAccess}},
			{name: "send flags", s: p.client, iov: iov(mem[:1]), flags: exs.MsgWaitAll, want: []error{exs.ErrInvalid}},
			{name: "recv flags", s: p.server, recv: true, iov: iov(mem[:1]), flags: 0x80, want: []error{exs.ErrInvalid}},
			{name: "recv of two buffers, direct-only", s: pd.server, recv: true, iov: iov(mem[:1], mem[1:2]), want: []error{exs.ErrInvalid}},
			{name: "send of MaxIOV buffers", s: p.client, iov: maxOK},
			{name: "waitall recv of two buffers, direct-only", s: pd.server, recv: true, iov: iov(mem[8:9], mem[9:16]), flags: exs.MsgWaitAll},
			{name: "recv of one buffer and empties, direct-only", s: pd.server, recv: true, iov: iov(nil, mem[:8], nil)},
		} {
			var err error
			op := "sendmsg"
			if tt.recv {
				op = "recvmsg"
				err = tt.s.RecvMsg(p.q, tt.iov, tt.flags, tt.name)
			} else {
				err = tt.s.SendMsg(p.q, tt.iov, tt.flags, tt.name)
			}
			if tt.want == nil {
				if err != nil {
					t.Errorf("%s: %v", tt.name, err)
				}
				continue
			}
			checkErr(t, tt.name, err, op, tt.want...)
		}
		// The two valid posts complete: the send of MaxIOV bytes by a recv
		// of as many, the direct-only recv by a send.
		rb := make([]byte, exs.MaxIOV)
		if err := p.server.Recv(p.q, rb, nil, exs.MsgWaitAll, "r"); err != nil {
			t.Fatal(err)
		}
		if err := pd.client.Send(p.q, []byte("1234567890abcdef"), nil, 0, "s"); err != nil {
			t.Fatal(err)
		}
		got := map[any]brief{}
		for range 5 {
			ev := wait(t, p.q)
			b := briefOf(ev)
			b.User = nil
			got[ev.User] = b
		}
		want := map[any]brief{
			"send of MaxIOV buffers": {Type: exs.EventSendMsg, N: exs.MaxIOV},
			"r":                      {Type: exs.EventRecv, N: exs.MaxIOV},
			"s":                      {Type: exs.EventSend, N: 16},
			"waitall recv of two buffers, direct-only":    {Type: exs.EventRecvMsg, N: 8},
			"recv of one buffer and empties, direct-only": {Type: exs.EventRecvMsg, N: 8},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		noEvent(t, p.q)
	})
}

// gather returns the first n bytes of the buffers of v, in order.
func gather(v []exs.IOVec, n int) []byte {
	var b []byte
	for _, e := range v {
		k := min(n-len(b), len(e.Buf))
		b = append(b, e.Buf[:k]...)
	}
	return b
}

// vecAlloc carves the buffers of random vectors out of a registered arena
// (with its handle) or the heap (without), piece by piece at random.
type vecAlloc struct {
	r     *rand.Rand
	arena []byte
	mh    *exs.MHandle
	next  int
}

// vector returns a vector of total bytes in 1 to maxN pieces, with an empty
// piece among them now and then.
func (a *vecAlloc) vector(total, maxN int) []exs.IOVec {
	n := 1 + a.r.IntN(maxN)
	cuts := []int{0, total}
	for range n - 1 {
		cuts = append(cuts, a.r.IntN(total+1))
	}
	slicesSort(cuts)
	v := make([]exs.IOVec, 0, n)
	for i := 1; i < len(cuts); i++ {
		k := cuts[i] - cuts[i-1]
		if k > 0 && a.r.IntN(2) == 0 && a.next+k <= len(a.arena) {
			v = append(v, exs.IOVec{Buf: a.arena[a.next : a.next+k : a.next+k], MH: a.mh})
			a.next += k
		} else {
			v = append(v, exs.IOVec{Buf: make([]byte, k)})
		}
	}
	return v
}

func slicesSort(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestVecIntegrity sends random vectors (1 to 9 pieces, mixed registered
// and not, empty pieces among them) and receives them into random vectors
// or plain buffers, with and without MsgWaitAll, on streams and seqpacket
// sockets in each mode, and checks every byte.
func TestVecIntegrity(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, typ := range []exs.SockType{exs.SockStream, exs.SockSeqPacket} {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			t.Run(typ.String()+"/"+mode.String(), func(t *testing.T) {
				forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
					vecIntegrity(t, rand.New(rand.NewPCG(seed, uint64(typ)<<8|uint64(mode))), typ, mode, addr(t))
				})
			})
		}
	}
}

func vecIntegrity(t *testing.T, r *rand.Rand, typ exs.SockType, mode exs.Mode, addr string) {
	const (
		rounds  = 40
		window  = 4
		maxSize = 300 << 10
	)
	st := newStack(t)
	p := connectAddr(t, st, typ, addr, exs.WithMode(mode), exs.WithStreamBuffer(1<<20))
	q := newQueue(t, st, 4*window+8)
	newAlloc := func() *vecAlloc {
		arena, err := st.Alloc(window * maxSize)
		if err != nil {
			t.Fatal(err)
		}
		mh, err := st.Mregister(arena, exs.AccessRead|exs.AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Mderegister(mh)
			st.Free(arena)
		})
		return &vecAlloc{r: r, arena: arena, mh: mh}
	}
	sa, ra := newAlloc(), newAlloc()
	sizes := make([]int, rounds)
	var total int
	for i := range sizes {
		sizes[i] = 1 + r.IntN(maxSize)
		if typ == exs.SockSeqPacket && r.IntN(8) == 0 {
			sizes[i] = 0 // an empty message
		}
		total += sizes[i]
	}
	type recvOp struct {
		v       []exs.IOVec
		waitAll bool
	}
	var (
		posted, sent, outS int    // sends
		soff               uint64 // stream offset of the next send
		recvs              []recvOp
		nextRecv, doneRecv int    // recvs
		roff               uint64 // stream offset of the next recv
		ahead              int    // room of the recvs outstanding (stream)
	)
	postSend := func() {
		n := sizes[posted]
		sa.next = posted % window * maxSize
		v := iov(nil, []byte{})
		if n > 0 {
			v = sa.vector(n, 9)
		}
		for _, e := range v {
			fillStream(e.Buf, soff)
			soff += uint64(len(e.Buf))
		}
		if err := p.client.SendMsg(q, v, 0, posted); err != nil {
			t.Fatalf("sendmsg %d: %v", posted, err)
		}
		posted++
		outS++
	}
	postRecv := func(n int) {
		op := recvOp{waitAll: typ == exs.SockStream && r.IntN(2) == 0}
		maxN := 9
		if mode == exs.ModeDirectOnly && !op.waitAll {
			maxN = 1 // a RecvMsg into several buffers needs MsgWaitAll
		}
		ra.next = nextRecv % window * maxSize
		op.v = ra.vector(n, maxN)
		var flags exs.Flags
		if op.waitAll {
			flags = exs.MsgWaitAll
		}
		user := -1 - nextRecv
		var err error
		switch {
		case len(op.v) == 1 && r.IntN(2) == 0:
			err = p.server.Recv(q, op.v[0].Buf, op.v[0].MH, flags, user)
		case len(op.v) == 1:
			op.v = append(op.v, exs.IOVec{}, exs.IOVec{Buf: []byte{}})
			fallthrough
		default:
			err = p.server.RecvMsg(q, op.v, flags, user)
		}
		if err != nil {
			t.Fatalf("recvmsg %d: %v", nextRecv, err)
		}
		recvs = append(recvs, op)
		nextRecv++
		ahead += n
	}
	for typ == exs.SockSeqPacket && doneRecv < rounds || typ == exs.SockStream && roff < uint64(total) || sent < rounds {
		for outS < window && posted < rounds {
			postSend()
		}
		for nextRecv-doneRecv < window {
			if typ == exs.SockSeqPacket {
				if nextRecv == rounds {
					break
				}
				postRecv(maxSize) // room for any message
				continue
			}
			// Never more room than bytes to come, so that a MsgWaitAll
			// recv fills.
			room := total - int(roff) - ahead
			if room == 0 {
				break
			}
			postRecv(1 + r.IntN(min(room, maxSize)))
		}
		ev := wait(t, q)
		if ev.Err != nil {
			t.Fatalf("%v %v: %v", ev.Type, ev.User, ev.Err)
		}
		i := ev.User.(int)
		if i >= 0 {
			if ev.Type != exs.EventSendMsg || ev.N != sizes[i] {
				t.Fatalf("send %d: %v of %d bytes, want %d", i, ev.Type, ev.N, sizes[i])
			}
			sent++
			outS--
			continue
		}
		if i = -1 - i; i != doneRecv {
			t.Fatalf("recv %d completed before recv %d", i, doneRecv)
		}
		op := recvs[i]
		recvs[i] = recvOp{}
		doneRecv++
		room := totalLen(op.v)
		ahead -= room
		switch {
		case typ == exs.SockSeqPacket && ev.N != sizes[i]:
			t.Fatalf("message %d: %d bytes, want %d", i, ev.N, sizes[i])
		case op.waitAll && ev.N != room:
			t.Fatalf("waitall recv %d: %d bytes of %d", i, ev.N, room)
		case typ == exs.SockStream && (ev.N == 0 || ev.N > room):
			t.Fatalf("recv %d: %d bytes of %d", i, ev.N, room)
		}
		if k := checkStream(gather(op.v, ev.N), roff); k >= 0 {
			t.Fatalf("recv %d: wrong byte %d of %d at stream offset %d", i, k, ev.N, roff)
		}
		roff += uint64(ev.N)
	}
	if roff != uint64(total) {
		t.Fatalf("received %d bytes of %d", roff, total)
	}
	t.Logf("client %+v", p.client.Stats().Stats)
	t.Logf("server %+v", p.server.Stats().Stats)
}

func totalLen(v []exs.IOVec) int {
	n := 0
	for _, e := range v {
		n += len(e.Buf)
	}
	return n
}

// vecResult is what the semantics tests check of an event.
type vecResult struct {
	Type exs.EventType
	N    int
	EOF  bool
	Err  string // the errno's name, "" for none
	Data string // the bytes received
}

func vecResultOf(ev exs.Event, data []byte) vecResult {
	r := vecResult{Type: ev.Type, N: ev.N, EOF: ev.EOF}
	if ev.Err != nil {
		r.Err = ev.Err.Error()
		for _, e := range []syscall.Errno{syscall.ECONNRESET, syscall.EMSGSIZE, syscall.ECANCELED, syscall.EPIPE} {
			if errors.Is(ev.Err, e) {
				r.Err = e.Error()
				break
			}
		}
	}
	if data != nil && ev.Err == nil {
		r.Data = string(data[:ev.N])
	}
	return r
}

// TestVecWaitAll checks MsgWaitAll on a RecvMsg: it completes only once
// every buffer is full, or short at the end of the stream.
func TestVecWaitAll(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeIndirectOnly} {
			t.Run(mode.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, addr(t), exs.WithMode(mode))
				a, b := make([]byte, 10), make([]byte, 20)
				if err := p.server.RecvMsg(p.q, iov(a, nil, b), exs.MsgWaitAll, "recv"); err != nil {
					t.Fatal(err)
				}
				want := ""
				for i := range 5 {
					chunk := []byte("abcdef")
					chunk[0] = byte('0' + i)
					want += string(chunk)
					if err := p.client.Send(p.q, chunk, nil, 0, i); err != nil {
						t.Fatal(err)
					}
					if i < 4 {
						waitType(t, p.q, exs.EventSend, i)
						noEvent(t, p.q)
					}
				}
				got := map[any]vecResult{}
				for range 2 {
					ev := wait(t, p.q)
					var data []byte
					if ev.User == "recv" {
						data = append(append([]byte{}, a...), b...)
					}
					got[ev.User] = vecResultOf(ev, data)
				}
				if diff := cmp.Diff(map[any]vecResult{
					4:      {Type: exs.EventSend, N: 6},
					"recv": {Type: exs.EventRecvMsg, N: 30, Data: want},
				}, got); diff != "" {
					t.Errorf("waitall recvmsg (-want +got):\n%s", diff)
				}

				// At the end of the stream: short, then EOF.
				if err := p.server.RecvMsg(p.q, iov(a, b), exs.MsgWaitAll, "short"); err != nil {
					t.Fatal(err)
				}
				if err := p.server.RecvMsg(p.q, iov(a, b), exs.MsgWaitAll, "eof"); err != nil {
					t.Fatal(err)
				}
				if err := p.client.Send(p.q, []byte("0123456789AB"), nil, 0, "send"); err != nil {
					t.Fatal(err)
				}
				if err := p.client.Shutdown(p.q, "shutdown"); err != nil {
					t.Fatal(err)
				}
				got2 := map[any]vecResult{}
				for range 4 {
					ev := wait(t, p.q)
					var data []byte
					if ev.User == "short" {
						data = append(append([]byte{}, a...), b[:2]...)
					}
					got2[ev.User] = vecResultOf(ev, data)
				}
				want2 := map[any]vecResult{
					"send":     {Type: exs.EventSend, N: 12},
					"shutdown": {Type: exs.EventShutdown},
					"short":    {Type: exs.EventRecvMsg, N: 12, Data: "0123456789AB"},
					"eof":      {Type: exs.EventRecvMsg, EOF: true},
				}
				if diff := cmp.Diff(want2, got2); diff != "" {
					t.Errorf("at the end of the stream (-want +got):\n%s", diff)
				}
			})
		}
	})
}

// TestVecSemantics checks, case by case, what one SendMsg or RecvMsg
// completes with: without MsgWaitAll a stream RecvMsg takes what there is;
// on a seqpacket socket one SendMsg is one message and one RecvMsg takes
// one message, a vector of empty buffers sending an empty one.
func TestVecSemantics(t *testing.T) {
	type tcase struct {
		name      string
		typ       exs.SockType
		send      [][]byte // a SendMsg of these, or
		sendPlain []byte   // a Send of this
		recv      []int    // a RecvMsg into buffers of these lengths
		want      vecResult
	}
	for _, tt := range []tcase{
		{name: "stream, partial", typ: exs.SockStream, send: [][]byte{[]byte("abc"), []byte("def")}, recv: []int{4, 0, 16},
			want: vecResult{Type: exs.EventRecvMsg, N: 6, Data: "abcdef"}},
		{name: "stream, into one buffer", typ: exs.SockStream, send: [][]byte{[]byte("ab"), nil, []byte("cd")}, recv: []int{0, 8},
			want: vecResult{Type: exs.EventRecvMsg, N: 4, Data: "abcd"}},
		{name: "seqpacket, one message", typ: exs.SockSeqPacket, send: [][]byte{[]byte("ab"), nil, []byte("cde"), []byte("f")}, recv: []int{3, 3, 3},
			want: vecResult{Type: exs.EventRecvMsg, N: 6, Data: "abcdef"}},
		{name: "seqpacket, exactly full", typ: exs.SockSeqPacket, send: [][]byte{[]byte("abcd")}, recv: []int{2, 2},
			want: vecResult{Type: exs.EventRecvMsg, N: 4, Data: "abcd"}},
		{name: "seqpacket, empty message", typ: exs.SockSeqPacket, send: [][]byte{nil, {}}, recv: []int{2, 2},
			want: vecResult{Type: exs.EventRecvMsg}},
		{name: "seqpacket, too long", typ: exs.SockSeqPacket, send: [][]byte{[]byte("abcde"), []byte("fghij")}, recv: []int{3, 3},
			want: vecResult{Type: exs.EventRecvMsg, Err: syscall.EMSGSIZE.Error()}},
		{name: "seqpacket, plain send", typ: exs.SockSeqPacket, sendPlain: []byte("abcdefg"), recv: []int{1, 2, 0, 4},
			want: vecResult{Type: exs.EventRecvMsg, N: 7, Data: "abcdefg"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
				for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeIndirectOnly} {
					st := newStack(t)
					p := connectAddr(t, st, tt.typ, addr(t), exs.WithMode(mode))
					var rv []exs.IOVec
					for _, n := range tt.recv {
						rv = append(rv, exs.IOVec{Buf: make([]byte, n)})
					}
					if err := p.server.RecvMsg(p.q, rv, 0, "recv"); err != nil {
						t.Fatal(err)
					}
					var err error
					if tt.sendPlain != nil {
						err = p.client.Send(p.q, tt.sendPlain, nil, 0, "send")
					} else {
						err = p.client.SendMsg(p.q, iov(tt.send...), 0, "send")
					}
					if err != nil {
						t.Fatal(err)
					}
					got := map[any]exs.Event{}
					for range 2 {
						ev := wait(t, p.q)
						got[ev.User] = ev
					}
					if ev := got["send"]; tt.want.Err == "" && ev.Err != nil {
						t.Errorf("%v: send: %v", mode, ev.Err)
					}
					if diff := cmp.Diff(tt.want, vecResultOf(got["recv"], gather(rv, got["recv"].N))); diff != "" {
						t.Errorf("%v: recvmsg (-want +got):\n%s", mode, diff)
					}
				}
			})
		})
	}
}

// TestVecDirect checks that a SendMsg into a recv the peer advertised is
// one direct transfer, from buffers registered and not, with no copy at
// the receiver.
func TestVecDirect(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		st := newStack(t)
		p := connectAddr(t, st, exs.SockStream, addr(t), exs.WithMode(exs.ModeDirectOnly))
		const piece = 64 << 10
		rbuf := make([]byte, 4*piece)
		if err := p.server.Recv(p.q, rbuf, nil, exs.MsgWaitAll, "recv"); err != nil {
			t.Fatal(err)
		}
		reg := make([]byte, 2*piece)
		mh, err := st.Mregister(reg, exs.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		v := []exs.IOVec{{Buf: reg[:piece], MH: mh}, {Buf: make([]byte, piece)}, {Buf: reg[piece:], MH: mh}, {Buf: make([]byte, piece)}}
		off := uint64(0)
		for _, e := range v {
			fillStream(e.Buf, off)
			off += piece
		}
		if err := p.client.SendMsg(p.q, v, 0, "send"); err != nil {
			t.Fatal(err)
		}
		got := map[any]vecResult{}
		for range 2 {
			ev := wait(t, p.q)
			got[ev.User] = vecResultOf(ev, nil)
		}
		want := map[any]vecResult{"send": {Type: exs.EventSendMsg, N: 4 * piece}, "recv": {Type: exs.EventRecv, N: 4 * piece}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if k := checkStream(rbuf, 0); k >= 0 {
			t.Errorf("wrong byte at %d", k)
		}
		cs, ss := p.client.Stats(), p.server.Stats()
		type transfers struct{ Direct, BytesDirect, Indirect, Copied uint64 }
		if diff := cmp.Diff(transfers{Direct: 1, BytesDirect: 4 * piece},
			transfers{cs.TransfersDirect, cs.BytesDirect, cs.TransfersIndirect, ss.BytesCopied}); diff != "" {
			t.Errorf("transfers (-want +got):\n%s", diff)
		}
		if err := st.Mderegister(mh); err != nil {
			t.Errorf("mderegister after the send: %v", err)
		}

		// A RecvMsg with MsgWaitAll advertises each of its buffers: one
		// Send fills them by one direct transfer each, no copy.
		rmem := make([]byte, 2*piece)
		rmh, err := st.Mregister(rmem, exs.AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		rv := []exs.IOVec{{Buf: rmem[:piece], MH: rmh}, {Buf: make([]byte, piece)}, {}, {Buf: rmem[piece:], MH: rmh}, {Buf: make([]byte, piece)}}
		if err := p.server.RecvMsg(p.q, rv, exs.MsgWaitAll, "recvmsg"); err != nil {
			t.Fatal(err)
		}
		sbuf := make([]byte, 4*piece)
		fillStream(sbuf, 4*piece)
		if err := p.client.Send(p.q, sbuf, nil, 0, "send"); err != nil {
			t.Fatal(err)
		}
		got = map[any]vecResult{}
		for range 2 {
			ev := wait(t, p.q)
			got[ev.User] = vecResultOf(ev, nil)
		}
		want = map[any]vecResult{"send": {Type: exs.EventSend, N: 4 * piece}, "recvmsg": {Type: exs.EventRecvMsg, N: 4 * piece}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("recvmsg events (-want +got):\n%s", diff)
		}
		if k := checkStream(gather(rv, 4*piece), 4*piece); k >= 0 {
			t.Errorf("recvmsg: wrong byte at %d", k)
		}
		cs2, ss2 := p.client.Stats(), p.server.Stats()
		if diff := cmp.Diff(transfers{Direct: 1 + 4, BytesDirect: 8 * piece},
			transfers{cs2.TransfersDirect, cs2.BytesDirect, cs2.TransfersIndirect, ss2.BytesCopied}); diff != "" {
			t.Errorf("recvmsg transfers (-want +got):\n%s", diff)
		}
	})
}

// TestVecPeerReset checks the close rule on a MsgWaitAll RecvMsg: after the
// peer closed without shutting down, a RecvMsg that holds bytes completes
// with them and no error, even when its later buffers are empty, and the
// next one fails with ECONNRESET.
func TestVecPeerReset(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			t.Run(mode.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, addr(t), exs.WithMode(mode))
				a, b, c := make([]byte, 10), make([]byte, 20), make([]byte, 10)
				if err := p.server.RecvMsg(p.q, iov(a, b, c), exs.MsgWaitAll, "held"); err != nil {
					t.Fatal(err)
				}
				if err := p.server.RecvMsg(p.q, iov(a[:1], b[:1]), exs.MsgWaitAll, "after"); err != nil {
					t.Fatal(err)
				}
				if err := p.client.Send(p.q, []byte("0123456789abc"), nil, 0, "send"); err != nil {
					t.Fatal(err)
				}
				waitType(t, p.q, exs.EventSend, "send")
				if err := p.client.Close(p.q, "close"); err != nil {
					t.Fatal(err)
				}
				got := map[any]vecResult{}
				for range 3 {
					ev := wait(t, p.q)
					var data []byte
					if ev.User == "held" {
						data = append(append([]byte{}, a...), b...)
					}
					got[ev.User] = vecResultOf(ev, data)
				}
				want := map[any]vecResult{
					"close": {Type: exs.EventClose},
					"held":  {Type: exs.EventRecvMsg, N: 13, Data: "0123456789abc"},
					"after": {Type: exs.EventRecvMsg, Err: syscall.ECONNRESET.Error()},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	})
}

// TestVecCancel cancels a RecvMsg and a SendMsg outstanding: each counts
// once in the cancel's N, whatever its number of buffers, and completes
// with ECANCELED.
func TestVecCancel(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeDirectOnly, exs.ModeIndirectOnly} {
			t.Run(mode.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, addr(t), exs.WithMode(mode))
				if err := p.server.RecvMsg(p.q, iov(make([]byte, 10), make([]byte, 20)), exs.MsgWaitAll, "recvmsg"); err != nil {
					t.Fatal(err)
				}
				// No recv at the client: in direct-only mode this send
				// waits for one.
				if err := p.server.SendMsg(p.q, iov(make([]byte, 10), make([]byte, 20)), 0, "sendmsg"); err != nil {
					t.Fatal(err)
				}
				if err := p.server.CancelOp(p.q, "recvmsg", "cancel"); err != nil {
					t.Fatal(err)
				}
				got := map[any]vecResult{}
				for len(got) < 3 {
					ev := wait(t, p.q)
					got[ev.User] = vecResultOf(ev, nil)
				}
				ecanceled := syscall.ECANCELED.Error()
				want := map[any]vecResult{
					"recvmsg": {Type: exs.EventRecvMsg, Err: ecanceled},
					"cancel":  {Type: exs.EventCancel, N: 2},
				}
				if ev := got["sendmsg"]; mode == exs.ModeDirectOnly || ev.Err != "" {
					want["sendmsg"] = vecResult{Type: exs.EventSendMsg, Err: ecanceled}
				} else {
					// Written into the peer's stream buffer before the
					// cancel.
					want["sendmsg"] = vecResult{Type: exs.EventSendMsg, N: 30}
					want["cancel"] = vecResult{Type: exs.EventCancel, N: 1}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	})
}

// TestVecWrites counts the RDMA WRITEs of a SendMsg into a recv the peer
// advertised, through the faults wrapper of the in-process provider: the
// buffers of the send are the scatter/gather entries of one WRITE, up to 8
// per WRITE.
func TestVecWrites(t *testing.T) {
	for _, tt := range []struct {
		pieces, size int
		adjacent     bool  // the buffers follow each other in one handle
		want         []int // the lengths of the WRITEs
	}{
		{pieces: 1, size: 256 << 10, want: []int{256 << 10}},
		{pieces: 4, size: 64 << 10, want: []int{256 << 10}},
		{pieces: 8, size: 16 << 10, want: []int{128 << 10}},
		{pieces: 12, size: 16 << 10, want: []int{128 << 10, 64 << 10}},
		// Adjacent buffers are one entry: one WRITE.
		{pieces: 12, size: 16 << 10, adjacent: true, want: []int{192 << 10}},
	} {
		t.Run(fmt.Sprintf("%dx%s/adjacent=%v", tt.pieces, sizeName(tt.size), tt.adjacent), func(t *testing.T) {
			var (
				mu     sync.Mutex
				writes []int
			)
			fp := faults.New(inproc.New())
			fp.Set(faults.Filters{Message: func(m *faults.Msg) faults.Fault {
				if m.Op == verbs.OpWrite {
					mu.Lock()
					writes = append(writes, m.Len)
					mu.Unlock()
				}
				return faults.Fault{}
			}})
			st := newStack(t, exs.WithProvider("inproc", fp))
			p := connectAddr(t, st, exs.SockStream, testAddr(t), exs.WithMode(exs.ModeDirectOnly))
			total := tt.pieces * tt.size
			rbuf := make([]byte, total)
			if err := p.server.Recv(p.q, rbuf, nil, exs.MsgWaitAll, "recv"); err != nil {
				t.Fatal(err)
			}
			v := make([]exs.IOVec, tt.pieces)
			var mh *exs.MHandle
			mem := make([]byte, total)
			if tt.adjacent {
				var err error
				if mh, err = st.Mregister(mem, exs.AccessRead); err != nil {
					t.Fatal(err)
				}
			}
			for i := range v {
				v[i] = exs.IOVec{Buf: make([]byte, tt.size)}
				if tt.adjacent {
					v[i] = exs.IOVec{Buf: mem[i*tt.size : (i+1)*tt.size], MH: mh}
				}
				fillStream(v[i].Buf, uint64(i*tt.size))
			}
			if err := p.client.SendMsg(p.q, v, 0, "send"); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if ev := wait(t, p.q); ev.Err != nil || ev.N != total {
					t.Fatalf("%v: %d bytes, %v", ev.Type, ev.N, ev.Err)
				}
			}
			if k := checkStream(rbuf, 0); k >= 0 {
				t.Errorf("wrong byte at %d", k)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.want, writes); diff != "" {
				t.Errorf("WRITEs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVecManyQueued queues many SendMsg calls of many separate buffers
// before the peer's recv: a transfer gathers at most maxGather vectored
// sends, and the send queue holds one transfer of them at MaxIOV buffers
// each, with the fewest frames too (a transfer of 32 such sends, or of 8
// with one frame, waited for its own frame's completion for ever).
func TestVecManyQueued(t *testing.T) {
	forProviders(t, func(t *testing.T, addr func(testing.TB) string) {
		for _, frames := range []int{0, 1} {
			t.Run(fmt.Sprintf("frames=%d", frames), func(t *testing.T) {
				const sends = 48
				opts := []exs.SocketOption{exs.WithOutstanding(256, 16)}
				if frames > 0 {
					opts = append(opts, exs.WithFrames(frames))
				}
				st := newStack(t)
				p := connectAddr(t, st, exs.SockStream, addr(t), opts...)
				var want []byte
				for i := range sends {
					v := make([]exs.IOVec, exs.MaxIOV)
					for j := range v {
						b := []byte{byte(i*exs.MaxIOV + j)}
						want = append(want, b[0])
						v[j] = exs.IOVec{Buf: b}
					}
					if err := p.client.SendMsg(p.q, v, 0, i); err != nil {
						t.Fatal(err)
					}
				}
				got := make([]byte, len(want))
				if err := p.server.Recv(p.q, got, nil, exs.MsgWaitAll, "recv"); err != nil {
					t.Fatal(err)
				}
				seen := 0
				for seen < sends+1 {
					ev := wait(t, p.q)
					if ev.Err != nil {
						t.Fatalf("event %+v", ev)
					}
					seen++
				}
				if !bytes.Equal(got, want) {
					t.Error("the recv's bytes differ from the sends'")
				}
			})
		}
	})
}
