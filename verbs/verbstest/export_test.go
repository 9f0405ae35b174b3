package verbstest

// CallsInFlight returns how many calls of a remote peer (NewRemotePeer or
// StartPeerProcess) wait for their reply, so that a test can act while a
// call is in progress.
func CallsInFlight(p Peer) int {
	var rp *remotePeer
	switch v := p.(type) {
	case *remotePeer:
		rp = v
	case *ProcessPeer:
		rp = v.rp
	default:
		return 0
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.calls)
}
