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
