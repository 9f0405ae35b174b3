package shm

// The end of a connection: Terminate, the receiver's exit, the watcher of
// the socket, and the peer's going.

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/verbs"
)

const (
	accessLimit = 2 * time.Second // longest wait for the peer's copies to end
	lingerLimit = time.Second     // longest wait to hand the peer our last records
)

// Terminate ends the connection: it tells the peer (a recTerm record,
// after the outcome of the message being delivered if that is what
// failed), forbids the peer to touch this side's memory and waits for
// its copies in progress to end, and stops the goroutines.
func (l *link) Terminate(cause error) {
	l.tx.Lock()
	if l.tx.term || l.tx.dead {
		l.tx.term = true
		l.tx.Unlock()
		return
	}
	l.tx.term = true
	l.refs.Add(1) // the mapping stays while we wait
	l.tx.pendReq.reset()
	l.tx.inflight.clear()
	l.tx.termKind, l.tx.termText = termDisconnect, "disconnected"
	if cause != nil && !errors.Is(cause, verbs.ErrDisconnected) {
		l.tx.termKind, l.tx.termText = termError, cause.Error()
	}
	if l.delivering.Load() {
		l.tx.termPend = true
	} else {
		// What was delivered is acknowledged before the TERM, so that
		// the peer's sends it completes do not fail with the connection.
		l.flushAckLocked()
		l.emitLocked(item{kind: recTerm, code: l.tx.termKind, data: []byte(l.tx.termText)})
		l.peer.ring()
	}
	l.tx.Unlock()
	l.me.closed.Store(1)
	l.waitAccess()
	l.stop.Store(true)
	l.me.ringAlways()
	l.release()
}

// waitAccess waits until the peer's copies into or out of this side's
// memory have ended (it checks closed before it starts a new one), unless
// the peer is gone.
func (l *link) waitAccess() {
	var start time.Time
	for i := 0; l.me.access.Load() != 0; i++ {
		if l.peerGone.Load() {
			return
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > accessLimit {
			return // a peer that does not play by the rules
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// watch reads the socket until it fails: the peer closed it, or died, or
// the link closed it. After the handshake only arena messages come
// (onArenaMsg).
func (l *link) watch() {
	defer close(l.watchDone)
	var b [64]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := l.conn.ReadMsgUnix(b[:], oob)
		fds := parseFDs(oob[:oobn])
		if err != nil || n == 0 {
			closeFDs(fds)
			break
		}
		l.onArenaMsg(b[:n], fds)
	}
	l.markPeerGone()
}

// markPeerGone records that the peer process ended or closed the
// connection and wakes the receiver goroutine to finish it.
func (l *link) markPeerGone() {
	l.peerGone.Store(true)
	l.me.ringAlways()
}

// onPeerGone handles the end of the peer: what it wrote before it went is
// read (the outcome of a refused message, its TERM), then the endpoint is
// terminated, as by a reset connection.
func (l *link) onPeerGone() {
	if l.rx.respIn.ready() {
		l.processResp()
	}
	if !l.rx.peerTerm {
		l.ep.Terminated(fmt.Errorf("shm: peer closed the connection: %w", syscall.ECONNRESET))
	}
}

// exit releases what the receiver owns once it stops.
func (l *link) exit() {
	deadline := time.Now().Add(lingerLimit)
	for l.hasPend.Load() && !l.peerGone.Load() && time.Now().Before(deadline) {
		l.tx.Lock()
		l.tx.pendReq.reset() // requests are abandoned; outcomes and TERM go out
		l.pumpLocked()
		l.tx.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	l.conn.Close()
	<-l.watchDone
	l.tx.Lock()
	l.tx.dead, l.tx.term = true, true
	l.tx.pendReq.reset()
	l.tx.pendResp.reset()
	l.tx.inflight.clear()
	l.tx.Unlock()
	l.closePeerProcess(true)
	l.dropPeerArenas()
	l.p.removeLink(l)
	l.release()
	close(l.done)
}

// abandon releases a link that was never started.
func (l *link) abandon() {
	l.p.removeLink(l)
	l.conn.Close()
	l.closePeerProcess(false)
	l.release()
}
