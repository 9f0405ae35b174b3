package tcp

// The peer timeout and a shut window. Linux applies TCP_USER_TIMEOUT to
// zero-window probes too: a peer that answers them but keeps its window
// shut for longer than the timeout (its receiver holds a SEND for want of
// a RECV under RNRWait, and reads nothing more) would be taken as dead.
// A live peer that holds a message is no dead one, as an RDMA NIC's
// receiver-not-ready retries are no transport timeout: while the window is
// shut and the peer answers the probes, the link lifts its user timeout,
// and sets it again once the window opens or the peer leaves two probes
// in a row unanswered (the kernel then aborts the connection at its next
// probe, the window having been shut for longer than the timeout).

import (
	"time"

	"golang.org/x/sys/unix"
)

// maxUnanswered is how many zero-window probes in a row the peer may
// leave unanswered and still count as alive.
const maxUnanswered = 2

// watchPeriod returns how often a link looks at its window: a quarter of
// the peer timeout (at least 50 ms), so that a shut window is seen well
// before the kernel's first probe has waited the timeout.
func watchPeriod(d time.Duration) time.Duration { return max(d/4, 50*time.Millisecond) }

// startWatchLocked starts the window's watch of a link with a peer
// timeout. l.mu is held.
func (l *link) startWatchLocked() {
	if l.p.opts.peer > 0 {
		l.watch = time.AfterFunc(watchPeriod(l.p.opts.peer), l.watchWindow)
	}
}

// stopWatchLocked stops the watch: a run under way sees the link ending
// and does not start another. l.mu is held.
func (l *link) stopWatchLocked() {
	if l.watch != nil {
		l.watch.Stop()
	}
}

// watchWindow lifts or sets the user timeout after the window and the
// peer's answers, and runs again a period later, until the link ends. It
// runs under l.mu, so that the socket is not closed meanwhile (finishRx
// sets closing under mu before it closes it).
func (l *link) watchWindow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term || l.closing {
		return
	}
	d := l.p.opts.peer
	if info, err := unix.GetsockoptTCPInfo(l.fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
		// Nothing in flight but bytes waiting: the window holds them
		// (the kernel probes it). Probes counts the probes unanswered
		// since the peer's last ACK: a live peer answers at least
		// every other one (Linux rate-limits its answers to 2 a
		// second), a dead one none.
		shut := info.Unacked == 0 && info.Notsent_bytes > 0
		switch lift := shut && info.Probes < maxUnanswered; {
		case lift && !l.utoLifted:
			if setUserTimeout(l.fd, 0) == nil {
				l.utoLifted = true
				l.windowLifts++
			}
		case !lift && l.utoLifted:
			if setUserTimeout(l.fd, d) == nil {
				l.utoLifted = false
			}
		}
	}
	l.watch.Reset(watchPeriod(d))
}
