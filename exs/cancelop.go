package exs

import (
	"fmt"
	"reflect"
)

// slotInfo is what CancelOp may read, under Socket.mu, of an operation
// slot in use: the goroutine serving the socket owns the op itself.
type slotInfo struct {
	kind   opKind // 0: the slot is free
	user   any
	serial uint64
}

// CancelOp posts a cancel of one operation outstanding on the socket: the
// oldest one posted with the user value target (EXS_CAF_AHANDLE; Cancel
// is EXS_CAF_FILDES). target must be comparable and not nil. The cancel
// completes with an EventCancel whose N is the number of operations
// canceled, and whose Err matches ErrNotFound (syscall.ENOENT) if the
// operation completed before the cancel could take it (its own event then
// tells how it ended). CancelOp fails at once with ErrNotFound, posting
// nothing, when no operation with that user value is outstanding: never
// posted, or its event already posted.
//
// What a cancel of one operation does depends on where it is outstanding:
//
//   - An accept on a listening socket, or a poll, completes alone with
//     ECANCELED (N 1); the socket keeps listening, or its connection goes
//     on, and its other operations stay posted.
//   - A connect, send, recv or shutdown belongs to a connection, whose
//     bytes go through the protocol engine in order: a stream cannot skip
//     the bytes of one operation and carry on, and a message stream
//     cannot drop a message the peer may have begun to receive. Canceling
//     one of them therefore ends the connection exactly as Cancel does:
//     that operation and every other outstanding one complete with
//     ECANCELED, the peer sees the connection reset, and the socket takes
//     no more operations but Close. N counts them all.
//
// What a cancel of a stream operation means for the stream: the stream
// stops at the cancel. A canceled send reports in N exactly the bytes of it
// the peer gets: its recvs get them, in order, then ECONNRESET (the close
// rule); the bytes after them are never sent, and no later send goes on
// with the stream. On a seqpacket socket a canceled message counts whole
// (N its length, the peer gets it) or not at all (N 0). A canceled recv
// reports in N the bytes already placed in its buffer (they are there, and
// are not delivered again); on a stream a recv that holds part of its
// bytes ends with them.
//
// To make N exact the cancel first lets the transfers already under way
// finish: it starts no more, and waits for the provider to confirm the
// frames in flight, which needs the peer's provider but never the peer's
// application, and at most a second (a peer process stopped): after that
// the bytes in flight are not counted, though the peer may get them. An
// operation whose last bytes were among them may then complete
// successfully before the cancel; the connection ends all the same.
func (s *Socket) CancelOp(q *Queue, target any, user any) error {
	if err := s.checkQueue(q); err != nil {
		return opErr("cancel", "", err)
	}
	if target == nil || !reflect.ValueOf(target).Comparable() {
		return opErr("cancel", "", fmt.Errorf("%w: target user value %T is not comparable", ErrInvalid, target))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == sockClosed {
		return opErr("cancel", s.addr, ErrClosed)
	}
	idx := int32(-1)
	for i := range s.slots {
		si := &s.slots[i]
		switch si.kind {
		case 0, opCancel, opCancelOne:
			continue
		}
		if si.user == target && (idx < 0 || si.serial < s.slots[idx].serial) {
			idx = int32(i)
		}
	}
	if idx < 0 {
		return opErr("cancel", s.addr, fmt.Errorf("%w: no operation outstanding with user value %v", ErrNotFound, target))
	}
	if s.nctl >= ctlSlots {
		return opErr("cancel", s.addr, errTooMany)
	}
	if err := q.reserve(); err != nil {
		return opErr("cancel", s.addr, err)
	}
	s.nctl++
	if s.state == sockConnecting {
		// A connect under way cannot wait: it ends with the connection.
		s.cancelReq = true
	}
	if s.interrupt != nil {
		s.interrupt()
	}
	s.pushLocked(op{kind: opCancelOne, q: q, user: user, target: idx, tserial: s.slots[idx].serial})
	return nil
}

// cancelTarget reports whether the operation that cancel op o names is
// still outstanding. Called by the goroutine serving the socket.
func (s *Socket) cancelTarget(o *op) bool {
	t := &s.ops[o.target]
	return t.kind != 0 && t.serial == o.tserial
}
