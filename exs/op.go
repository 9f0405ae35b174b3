package exs

import (
	"errors"
	"runtime"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// opKind is the kind of an operation.
type opKind uint8

const (
	opSend opKind = iota + 1
	opRecv
	opAccept
	opConnect
	opShutdown
	opCancel
	opCancelOne // CancelOp: cancel the operation in slot target
	opPoll
)

var opNames = [...]string{"", "send", "recv", "accept", "connect", "shutdown", "cancel", "cancel", "poll"}

func (k opKind) String() string { return opNames[k] }

func (k opKind) event() EventType {
	switch k {
	case opSend:
		return EventSend
	case opRecv:
		return EventRecv
	case opAccept:
		return EventAccept
	case opConnect:
		return EventConnect
	case opShutdown:
		return EventShutdown
	case opPoll:
		return EventPoll
	}
	return EventCancel
}

// op is one posted operation, in a socket's table. The poster fills it in
// under Socket.mu; from then on the goroutine serving the socket owns it
// until it frees the slot.
type op struct {
	kind    opKind
	waitAll bool
	tmp     bool       // mr was registered for this operation alone
	poll    PollEvents // the conditions a poll waits for
	q       *Queue
	user    any
	buf     []byte
	addr    uint64 // address of buf
	mh      *MHandle
	mr      *verbs.MR // the registration of buf on the socket's device, if any
	msg     bool      // posted by SendMsg or RecvMsg
	vec     []piece   // SendMsg, RecvMsg: the buffers, if more than one is not empty
	vst     vecState  // a RecvMsg posted to the engine as one recv per buffer
	serial  uint64    // tells the operations of one slot apart (CancelOp)
	timeout opTimeout // WithOpTimeout's deadline and its reserved event
	target  int32     // the slot CancelOp cancels, with its serial in tserial
	tserial uint64
	placed  int           // bytes of a send that reached the peer (drain.go)
	sf      *sendfileArgs // a Sendfile's file and range (sendfile.go)
}

// ctlSlots is how many connect, shutdown and cancel operations may be
// outstanding on a socket.
const ctlSlots = 8

// completion is an operation whose event waits to be posted: its slot,
// kind and queue; the event is at the same index of Socket.doneEv.
type completion struct {
	idx  int32
	kind opKind
	q    *Queue
}

// releaseMem drops what the operation holds of its memory. A registration
// of the operation's own is deregistered before its event is posted: a
// peer's write into the buffer that took its reference before the
// connection went may still be being placed (Deregister then reports
// mreg.ErrBusy), and the buffer is the caller's again only once it is
// done, so releaseMem waits for it, a copy already under way.
func (o *op) releaseMem() {
	if o.vec != nil {
		o.releaseVec()
	}
	if o.mh != nil {
		o.mh.release()
	}
	if o.tmp {
		deregisterWait(o.mr)
	}
	if o.sf != nil {
		o.sf.release()
	}
}

// deregisterWait deregisters mr, waiting while a copy into it, already
// under way, holds it.
func deregisterWait(mr *verbs.MR) error {
	for {
		err := mr.Deregister()
		if !errors.Is(err, mreg.ErrBusy) {
			return err
		}
		runtime.Gosched()
	}
}
