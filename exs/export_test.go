package exs

// SetSendDepth makes connections created from now on use a send queue of
// depth n (at least 2: a write and its frame), so that tests reach the
// backlog of actions that wait for room. It returns a function that
// restores the default. Not safe for concurrent use with connection set-up.
func SetSendDepth(n int) (restore func()) {
	old := testSendDepth
	testSendDepth = n
	return func() { testSendDepth = old }
}

// SetPostHook makes f run each time an event has been queued, before its
// operation stops counting as posting to the queue. It returns a function
// that removes the hook.
func SetPostHook(f func(*Queue)) (restore func()) {
	testHookPosted.Store(&f)
	return func() { testHookPosted.Store(nil) }
}

// SetFinishHook makes f run when the goroutine ending a socket has taken
// the operations still queued and not yet completed them. It returns a
// function that removes the hook.
func SetFinishHook(f func(*Socket)) (restore func()) {
	testHookFinish.Store(&f)
	return func() { testHookFinish.Store(nil) }
}

// QueueBlocked returns how many Dequeue calls are blocked on q (past their
// spinning), so that a test can act once a waiter really waits.
func QueueBlocked(q *Queue) int { return q.eq.Blocked() }

// PeerGone reports whether s's goroutine has seen the peer end the
// connection.
func PeerGone(s *Socket) bool { return s.peerGone.Load() }

// AcceptWaiting reports whether the goroutine of the listening socket s is
// waiting for a connection request (interruptible).
func AcceptWaiting(s *Socket) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interrupt != nil
}

// SignalFDOf returns the descriptor the signal of q holds now, -1 if none
// (or released).
func SignalFDOf(q *Queue) int {
	s := q.sig.Load()
	if s == nil {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fd
}
