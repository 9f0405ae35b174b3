package exs_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/mreg"
)

// errIs records which of a set of targets err matches, for table tests.
func errIs(err error, targets ...error) []bool {
	got := make([]bool, len(targets))
	for i, t := range targets {
		got[i] = errors.Is(err, t)
	}
	return got
}

// checkErr fails unless err is an *OpError with operation op that matches
// every target.
func checkErr(t *testing.T, what string, err error, op string, targets ...error) {
	t.Helper()
	var oe *exs.OpError
	if !errors.As(err, &oe) || oe.Op != op {
		t.Errorf("%s: %v is not an *OpError of %q", what, err, op)
	}
	want := make([]bool, len(targets))
	for i := range want {
		want[i] = true
	}
	if diff := cmp.Diff(want, errIs(err, targets...)); diff != "" {
		t.Errorf("%s: %v: errors.Is of %v (-want +got):\n%s", what, err, targets, diff)
	}
}

func TestMregisterBadInput(t *testing.T) {
	st := newStack(t)
	other := newStack(t)
	buf := make([]byte, 4096)

	_, err := st.Mregister(nil, exs.AccessRead)
	checkErr(t, "nil buffer", err, "mregister", exs.ErrInvalid, syscall.EINVAL)
	_, err = st.Mregister(buf[:0], exs.AccessRead)
	checkErr(t, "empty buffer", err, "mregister", exs.ErrInvalid)
	_, err = st.Mregister(buf, 0)
	checkErr(t, "no access", err, "mregister", exs.ErrInvalid)
	_, err = st.Mregister(buf, 4)
	checkErr(t, "unknown access", err, "mregister", exs.ErrInvalid)

	err = st.Mderegister(nil)
	checkErr(t, "deregister nil", err, "mderegister", exs.ErrInvalid)
	mh, err := other.Mregister(buf, exs.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Mderegister(mh)
	checkErr(t, "deregister of another stack", err, "mderegister", exs.ErrInvalid)
	if err := other.Mderegister(mh); err != nil {
		t.Fatal(err)
	}
	err = other.Mderegister(mh)
	checkErr(t, "double deregister", err, "mderegister", exs.ErrInvalid, mreg.ErrDeregistered)
}

func TestBufferChecks(t *testing.T) {
	p := connect(t, exs.SockStream)
	buf := make([]byte, 8192)
	rd, err := p.st.Mregister(buf[:4096], exs.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := p.st.Mregister(buf[4096:], exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := p.st.Mregister(make([]byte, 64), exs.AccessRead|exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.st.Mderegister(gone); err != nil {
		t.Fatal(err)
	}
	otherStack := newStack(t)
	foreign, err := otherStack.Mregister(make([]byte, 64), exs.AccessRead)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		send    bool
		buf     []byte
		mh      *exs.MHandle
		flags   exs.Flags
		targets []error
	}{
		{"send nil buffer", true, nil, nil, 0, []error{exs.ErrInvalid}},
		{"send empty buffer", true, buf[:0], rd, 0, []error{exs.ErrInvalid}},
		{"recv nil buffer", false, nil, nil, 0, []error{exs.ErrInvalid}},
		{"recv empty buffer", false, buf[4096:4096], wr, 0, []error{exs.ErrInvalid}},
		{"send outside handle", true, buf[4000:4100], rd, 0, []error{exs.ErrInvalid, mreg.ErrBounds}},
		{"send wholly after handle", true, buf[4096:4200], rd, 0, []error{exs.ErrInvalid, mreg.ErrBounds}},
		{"send from another allocation", true, make([]byte, 64), rd, 0, []error{exs.ErrInvalid, mreg.ErrBounds}},
		{"recv wholly before handle", false, buf[:100], wr, 0, []error{exs.ErrInvalid, mreg.ErrBounds}},
		{"recv at the end of its handle", false, buf[8000:8192:8192][:192:192], wr, 0, nil},
		{"recv past handle", false, buf[4000:4200], wr, 0, []error{exs.ErrInvalid, mreg.ErrBounds}},
		{"send from write-only handle", true, buf[4096:5000], wr, 0, []error{exs.ErrAccess, syscall.EACCES}},
		{"recv into read-only handle", false, buf[:100], rd, 0, []error{exs.ErrAccess, syscall.EACCES}},
		{"deregistered handle", true, gone.Bytes(), gone, 0, []error{exs.ErrInvalid, mreg.ErrDeregistered}},
		{"handle of another stack", true, foreign.Bytes(), foreign, 0, []error{exs.ErrInvalid}},
		{"send flags", true, buf[:10], rd, exs.MsgWaitAll, []error{exs.ErrInvalid}},
		{"recv flags", false, buf[4096:4100], wr, 0x80, []error{exs.ErrInvalid}},
	}
	for _, tt := range tests {
		var err error
		op := "recv"
		if tt.send {
			op = "send"
			err = p.client.Send(p.q, tt.buf, tt.mh, tt.flags, tt.name)
		} else {
			err = p.server.Recv(p.q, tt.buf, tt.mh, tt.flags, tt.name)
		}
		if tt.targets == nil {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		checkErr(t, tt.name, err, op, tt.targets...)
	}
	// The one valid recv above completes when the client sends.
	if err := p.client.Send(p.q, buf[:192], rd, 0, "send"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ev := wait(t, p.q); ev.Err != nil {
			t.Fatalf("%v %v: %v", ev.Type, ev.User, ev.Err)
		}
	}
	noEvent(t, p.q)
}

func TestMderegisterBusy(t *testing.T) {
	p := connect(t, exs.SockStream)
	buf := make([]byte, 100)
	mh, err := p.st.Mregister(buf, exs.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.server.Recv(p.q, buf, mh, 0, "recv"); err != nil {
		t.Fatal(err)
	}
	err = p.st.Mderegister(mh)
	checkErr(t, "deregister in use", err, "mderegister", exs.ErrBusy, mreg.ErrBusy, syscall.EBUSY)
	if err := p.client.Send(p.q, []byte("x"), nil, 0, "send"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ev := wait(t, p.q); ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	// The recv's event is posted: the handle is free.
	if err := p.st.Mderegister(mh); err != nil {
		t.Fatalf("deregister after the event: %v", err)
	}
}

func TestQcreateBadInput(t *testing.T) {
	st := newStack(t)
	for _, depth := range []int{0, -1} {
		_, err := st.Qcreate(depth)
		checkErr(t, "depth", err, "qcreate", exs.ErrInvalid)
	}
	// An option where it does not apply does not compile; the types say
	// where each applies.
	if _, ok := any(exs.WithMode(exs.ModeDynamic)).(exs.QueueOption); ok {
		t.Error("WithMode is a QueueOption")
	}
	if _, ok := any(exs.WithProvider("x", nil)).(exs.SocketOption); ok {
		t.Error("WithProvider is a SocketOption")
	}
	if _, ok := any(exs.WithSpinTime(0)).(exs.QueueOption); !ok {
		t.Error("WithSpinTime is not a QueueOption")
	}
	_, err := st.Qcreate(1, exs.WithWaitMode(0))
	checkErr(t, "wait mode 0", err, "qcreate", exs.ErrInvalid)
	_, err = st.Qcreate(1, exs.WithSpinTime(-1))
	checkErr(t, "negative spin", err, "qcreate", exs.ErrInvalid)
	err = st.Qdelete(nil)
	checkErr(t, "delete nil", err, "qdelete", exs.ErrInvalid)
	other := newStack(t)
	oq := newQueue(t, other, 1)
	err = st.Qdelete(oq)
	checkErr(t, "delete another stack's queue", err, "qdelete", exs.ErrInvalid)

	var evs [2]exs.Event
	q := newQueue(t, st, 1)
	_, err = q.Dequeue(evs[:], 3, 0)
	checkErr(t, "min > len", err, "dequeue", exs.ErrInvalid)
	n, err := q.Dequeue(evs[:], 1, time.Millisecond)
	if n != 0 {
		t.Errorf("dequeued %d from an empty queue", n)
	}
	checkErr(t, "timeout", err, "dequeue", exs.ErrTimeout)
}

func TestOptionsBadInput(t *testing.T) {
	st := newStack(t)
	tests := []struct {
		name string
		opt  exs.SocketOption
	}{
		{"nil", nil},
		{"nil logger", exs.WithLogger(nil)},
		{"connect timeout 0", exs.WithConnectTimeout(0)},
		{"mode 0", exs.WithMode(0)},
		{"mode 4", exs.WithMode(4)},
		{"stream buffer 0", exs.WithStreamBuffer(0)},
		{"stream buffer too big", exs.WithStreamBuffer(exs.MaxStreamBuffer + 1)},
		{"frames 0", exs.WithFrames(0)},
		{"frames too many", exs.WithFrames(exs.MaxFrames + 1)},
		{"outstanding 0", exs.WithOutstanding(0, 1)},
		{"outstanding too many", exs.WithOutstanding(1, exs.MaxOutstanding+1)},
		{"wait mode", exs.WithWaitMode(9)},
	}
	for _, tt := range tests {
		_, err := st.Socket(exs.SockStream, tt.opt)
		checkErr(t, tt.name, err, "socket", exs.ErrInvalid)
	}
	for _, typ := range []exs.SockType{0, 3} {
		_, err := st.Socket(typ)
		checkErr(t, "socket type", err, "socket", exs.ErrInvalid)
	}
	_, err := exs.NewStack(exs.WithProvider("", nil))
	checkErr(t, "provider without scheme", err, "newstack", exs.ErrInvalid)
	_, err = exs.NewStack(exs.WithProvider("a:b", nil))
	checkErr(t, "provider scheme with a colon", err, "newstack", exs.ErrInvalid)
}

func TestSocketStateErrors(t *testing.T) {
	st := newStack(t)
	q := newQueue(t, st, 8)
	other := newQueue(t, newStack(t), 8)
	s, err := st.Socket(exs.SockStream)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)

	checkErr(t, "send unconnected", s.Send(q, buf, nil, 0, nil), "send", exs.ErrNotConnected, syscall.ENOTCONN)
	checkErr(t, "recv unconnected", s.Recv(q, buf, nil, 0, nil), "recv", exs.ErrNotConnected)
	checkErr(t, "shutdown unconnected", s.Shutdown(q, nil), "shutdown", exs.ErrNotConnected)
	checkErr(t, "accept not listening", s.Accept(q, nil), "accept", exs.ErrInvalid)
	checkErr(t, "listen unbound", s.Listen(0), "listen", exs.ErrInvalid)
	checkErr(t, "nil queue", s.Close(nil, nil), "close", exs.ErrInvalid)
	checkErr(t, "queue of another stack", s.Close(other, nil), "close", exs.ErrInvalid)
	checkErr(t, "bind empty", s.Bind(""), "bind", exs.ErrInvalid)
	checkErr(t, "bind unknown scheme", s.Bind("udp:1.2.3.4"), "bind", exs.ErrInvalid)
	checkErr(t, "connect unknown scheme", s.Connect(q, "udp:1.2.3.4", nil), "connect", exs.ErrInvalid)

	// Cancel with nothing outstanding completes at once.
	if err := s.Cancel(q, "cancel"); err != nil {
		t.Fatal(err)
	}
	if ev := waitType(t, q, exs.EventCancel, "cancel"); ev.N != 0 || ev.Err != nil {
		t.Fatalf("cancel: %d %v", ev.N, ev.Err)
	}

	// Two listeners on one address.
	addr := testAddr(t)
	if err := s.Bind(addr); err != nil {
		t.Fatal(err)
	}
	checkErr(t, "bind twice", s.Bind(addr), "bind", exs.ErrInvalid)
	if err := s.Listen(0); err != nil {
		t.Fatal(err)
	}
	s2, _ := st.Socket(exs.SockStream)
	if err := s2.Bind(addr); err != nil {
		t.Fatal(err)
	}
	checkErr(t, "listen on a taken address", s2.Listen(0), "listen", syscall.EADDRINUSE)
	checkErr(t, "connect a listening socket", s.Connect(q, addr, nil), "connect", exs.ErrInvalid, syscall.EISCONN)
	checkErr(t, "send on a listening socket", s.Send(q, buf, nil, 0, nil), "send", exs.ErrNotConnected)

	// Close, then everything fails with ErrClosed.
	if err := s.Close(q, "close"); err != nil {
		t.Fatal(err)
	}
	waitType(t, q, exs.EventClose, "close")
	checkErr(t, "double close", s.Close(q, nil), "close", exs.ErrClosed)
	checkErr(t, "send closed", s.Send(q, buf, nil, 0, nil), "send", exs.ErrClosed)
	checkErr(t, "recv closed", s.Recv(q, buf, nil, 0, nil), "recv", exs.ErrClosed)
	checkErr(t, "accept closed", s.Accept(q, nil), "accept", exs.ErrClosed)
	checkErr(t, "cancel closed", s.Cancel(q, nil), "cancel", exs.ErrClosed)
	checkErr(t, "shutdown closed", s.Shutdown(q, nil), "shutdown", exs.ErrClosed)
	checkErr(t, "connect closed", s.Connect(q, addr, nil), "connect", exs.ErrClosed)
	checkErr(t, "bind closed", s.Bind(addr), "bind", exs.ErrClosed)
	if err := s2.Close(q, "close2"); err != nil {
		t.Fatal(err)
	}
	waitType(t, q, exs.EventClose, "close2")
	noEvent(t, q)

	// A closed stack refuses everything.
	st2, err := exs.NewStack()
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Close(); err != nil {
		t.Fatal(err)
	}
	checkErr(t, "close stack twice", st2.Close(), "close", exs.ErrClosed)
	_, err = st2.Socket(exs.SockStream)
	checkErr(t, "socket on a closed stack", err, "socket", exs.ErrClosed)
	_, err = st2.Qcreate(1)
	checkErr(t, "queue on a closed stack", err, "qcreate", exs.ErrClosed)
	_, err = st2.Mregister(buf, exs.AccessRead)
	checkErr(t, "mregister on a closed stack", err, "mregister", exs.ErrClosed)
}

func TestDoubleCloseConnected(t *testing.T) {
	p := connect(t, exs.SockStream)
	if err := p.client.Close(p.q, "close"); err != nil {
		t.Fatal(err)
	}
	checkErr(t, "second close", p.client.Close(p.q, "again"), "close", exs.ErrClosed)
	// Nothing more is accepted on the closed connected socket.
	buf := make([]byte, 10)
	checkErr(t, "send closed", p.client.Send(p.q, buf, nil, 0, nil), "send", exs.ErrClosed)
	checkErr(t, "recv closed", p.client.Recv(p.q, buf, nil, 0, nil), "recv", exs.ErrClosed)
	checkErr(t, "shutdown closed", p.client.Shutdown(p.q, nil), "shutdown", exs.ErrClosed)
	checkErr(t, "cancel closed", p.client.Cancel(p.q, nil), "cancel", exs.ErrClosed)
	waitType(t, p.q, exs.EventClose, "close")
	checkErr(t, "third close", p.client.Close(p.q, "again"), "close", exs.ErrClosed)
	noEvent(t, p.q)
}
