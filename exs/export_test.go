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
