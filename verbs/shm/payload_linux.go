package shm

// Payload I/O: the Payload and Sink of a request handed to
// Endpoint.Deliver, which read the initiator's bytes from the ring or its
// memory and write a READ's response, and the target's copies by
// cross-memory attach.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/verbs"
)

// payloadReader is the Payload of a request handed to Deliver: inline
// bytes from the ring, or the initiator's memory by process_vm_readv.
type payloadReader struct {
	l      *link
	mode   byte
	cur    []byte // unread inline bytes of the record at the head
	recLen int    // length of the record at the head of the ring
	rem    int    // bytes not yet read
	iov    []unix.RemoteIovec
	off    int // bytes read, for modeIov
}

// reset prepares the reader for the request rec of n bytes.
func (r *payloadReader) reset(op verbs.Opcode, mode byte, rec []byte, n, nseg int) error {
	r.mode, r.recLen, r.rem, r.off, r.cur = mode, len(rec), n, 0, nil
	r.iov = r.iov[:0]
	body := rec[reqHdr:]
	switch mode {
	case modeInline:
		if len(body) > n || op == verbs.OpRead {
			return errCorrupt
		}
		r.cur = body
	case modeIov:
		if !r.l.cma || len(body) != 16*nseg || nseg > verbs.MaxSGE {
			return errCorrupt
		}
		total := uint64(0)
		for i := range nseg {
			a := binary.LittleEndian.Uint64(body[16*i:])
			k := binary.LittleEndian.Uint64(body[16*i+8:])
			total += k
			if k > verbs.MaxMessage || a+k < a {
				return errCorrupt
			}
			if k > 0 {
				r.iov = append(r.iov, unix.RemoteIovec{Base: uintptr(a), Len: int(k)})
			}
		}
		if total != uint64(n) {
			return errCorrupt
		}
	case modeRData:
		if op != verbs.OpRead || len(body) != 0 {
			return errCorrupt
		}
	default:
		return errCorrupt
	}
	return nil
}

// Read reads the next bytes of the payload.
func (r *payloadReader) Read(p []byte) (int, error) {
	if r.rem == 0 {
		return 0, io.EOF
	}
	if r.mode == modeIov {
		return r.pull(p)
	}
	if r.mode != modeInline {
		return 0, io.EOF
	}
	l := r.l
	if len(r.cur) == 0 {
		// The record at the head is used up: move on to the next
		// fragment. The request can no longer be held back.
		l.rx.reqIn.advance(r.recLen)
		l.publishIn(&l.rx.reqIn)
		rec, err := l.waitIn()
		if err != nil {
			r.recLen = 0
			return 0, err
		}
		r.recLen = len(rec)
		if rec[4] != recFrag || len(rec) == recHdr || len(rec)-recHdr > r.rem {
			return 0, errCorrupt
		}
		r.cur = rec[recHdr:]
	}
	n := placeCopy(p, r.cur)
	r.cur = r.cur[n:]
	r.rem -= n
	return n, nil
}

// waitIn waits until the request ring has a record, pumping this side's
// own waiting records meanwhile, or fails once the link stops.
func (l *link) waitIn() ([]byte, error) {
	var spinStart time.Time
	for {
		rec, err := l.rx.reqIn.peek()
		if err != nil || rec != nil {
			return rec, err
		}
		if l.stop.Load() || l.peerGone.Load() {
			return nil, fmt.Errorf("shm: connection ended in the middle of a message: %w (%w)", verbs.ErrDisconnected, io.ErrUnexpectedEOF)
		}
		if l.pumpIfPending() {
			continue
		}
		if spinStart.IsZero() {
			spinStart = time.Now()
		}
		if time.Since(spinStart) < l.p.opts.spin {
			runtime.Gosched()
			continue
		}
		l.me.sleeping.Store(sleepNormal)
		v := l.me.bell.Load()
		if !l.rx.reqIn.ready() && !l.stop.Load() && !l.peerGone.Load() && !l.pumpIfPending() {
			sleepOn(&l.me.bell, v, int64(sleepCap))
		}
		l.me.sleeping.Store(awake)
		spinStart = time.Time{}
	}
}

// pull reads bytes from the initiator's memory.
func (r *payloadReader) pull(p []byte) (int, error) {
	l := r.l
	k := min(len(p), r.rem)
	v := &l.rx.iov
	v.addLocal(p[:k])
	remoteFrom(v, r.iov, r.off, k)
	n, err := l.peerTransfer(v, false, k, r.off == 0)
	r.off += n
	r.rem -= n
	if err != nil {
		return n, fmt.Errorf("shm: read the initiator's memory: %w", err)
	}
	return n, nil
}

// peerErr marks a cross-memory-attach failure that says the peer process
// is gone (ESRCH) as a reset connection, which is what it is: the same
// error the closing of the Unix socket reports a moment later
// (verbs.ErrDisconnected, ECONNRESET).
func peerErr(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: the peer process is gone (%w)", verbs.ErrDisconnected, err)
	}
	return err
}

// peerTransfer moves k bytes between the local and remote iovecs set up in
// v (into the peer's memory if write), unless the peer has terminated,
// holding the peer's access count meanwhile so that the peer's
// deregistration waits for the copy; v is reset afterwards. first counts a
// pull in the statistics.
func (l *link) peerTransfer(v *iovecs, write bool, k int, first bool) (int, error) {
	l.peer.access.Add(1)
	var n int
	var err error
	if l.peer.closed.Load() != 0 {
		err = fmt.Errorf("shm: peer terminated: %w", verbs.ErrDisconnected)
	} else {
		n, err = l.cmaTransfer(v, write, k)
	}
	l.peer.access.Add(-1)
	v.reset()
	if first {
		l.st.pulls.Add(1)
	}
	return n, err
}

// discard skips payload bytes Deliver did not read.
func (r *payloadReader) discard() error {
	var buf [512]byte
	for r.rem > 0 {
		if _, err := r.Read(buf[:min(len(buf), r.rem)]); err != nil {
			return err
		}
	}
	return nil
}

// remoteFrom appends to v the k bytes of iov starting at offset off.
func remoteFrom(v *iovecs, iov []unix.RemoteIovec, off, k int) {
	for _, s := range iov {
		if k == 0 {
			return
		}
		if off >= s.Len {
			off -= s.Len
			continue
		}
		n := min(s.Len-off, k)
		v.remote = append(v.remote, unix.RemoteIovec{Base: s.Base + uintptr(off), Len: n})
		k -= n
		off = 0
	}
}

// sinkWriter is the Sink of a READ handed to Deliver: it writes the bytes
// into the initiator's memory by process_vm_writev, or sends them back in
// recRData records.
type sinkWriter struct {
	l    *link
	mode byte
	id   uint32
	iov  []unix.RemoteIovec
	off  int
	rem  int
}

func (w *sinkWriter) reset(mode byte, id uint32, iov []unix.RemoteIovec, n int) {
	w.mode, w.id, w.iov, w.off, w.rem = mode, id, iov, 0, n
}

// Write sends b, the next bytes of the READ's response.
func (w *sinkWriter) Write(b []byte) (int, error) {
	if len(b) > w.rem {
		return 0, io.ErrShortWrite
	}
	l := w.l
	if w.mode == modeRData {
		l.tx.Lock()
		if !l.tx.dead {
			l.flushAckLocked()
			l.emitLocked(item{kind: recRData, id: w.id, data: b})
			l.peer.ring()
		}
		l.tx.Unlock()
		w.rem -= len(b)
		return len(b), nil
	}
	v := &l.rx.iov
	v.addLocal(b)
	remoteFrom(v, w.iov, w.off, len(b))
	n, err := l.peerTransfer(v, true, len(b), w.off == 0)
	w.off += n
	w.rem -= n
	if err != nil {
		return n, fmt.Errorf("shm: write the initiator's memory: %w", err)
	}
	return n, nil
}
