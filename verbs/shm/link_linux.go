package shm

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/internal/bigcopy"
	"github.com/exsgo/exs/verbs"
)

// link is one end of a connection: it owns the shared mapping, the Unix
// socket, and two goroutines (the receiver, which reads the peer's rings
// and hands messages to the local endpoint, and the watcher, which reads
// the socket to learn that the peer closed it or died). Both stop after
// Terminate or when the peer is gone.
//
// Its state falls into groups by what guards it:
//
//   - the fields at the top, set while the connection is set up and never
//     changed once the link starts (the shared mapping they point into is
//     read and written with atomics; the entries of this side's table
//     under p.mu, shm_linux.go);
//   - tx, under its mutex: everything this side writes into the rings it
//     produces (sending: send_linux.go), the messages in flight, the
//     termination to send, and the peer's arenas mapped here, which a copy
//     made under tx uses;
//   - pmu, under the provider's mu: what the provider shares with the link
//     about this side's shared-allocator arenas (arena_linux.go);
//   - sock, under its mutex: the writer of arena messages to the socket;
//   - rx, owned by the receiver goroutine (run, and the calls into the
//     endpoint it makes: receiving, recv_linux.go, and payload I/O,
//     payload_linux.go): the rings it consumes and the message it
//     delivers; no lock, no other goroutine touches it;
//   - atomics at the bottom, read and written by any of them.
type link struct {
	p       *Provider
	ep      *verbs.Endpoint
	pd      *verbs.PD
	side    int
	peerPID int
	addrs   verbs.Peer      // the ends' addresses and the peer's credentials
	cma     bool            // cross-memory attach works both ways
	cmaErr  string          // why not, if it does not
	peerRNR verbs.RNRPolicy // the peer queue pair's policy, applied here
	relaxed bool            // the queue pair's RelaxedWritePlacement
	busy    bool            // the queue pair's BusyPoll: the receiver never sleeps
	conn    *net.UnixConn
	m       []byte
	me      *sideBlock
	peer    *sideBlock
	mine    table // published by this side
	theirs  table // published by the peer
	maxReq  int   // largest request record
	maxResp int   // largest response record

	// The peer process (pidfd_linux.go): a pidfd, or -1, opened at the
	// rendezvous and closed by exit once tx.dead is set (no copy uses it
	// then), or by abandon for a link that never started; pidf holds it
	// while watchPeerProcess's goroutine waits on it.
	pidfd   int
	pidf    *os.File
	pidDone chan struct{}

	tx struct {
		sync.Mutex
		term     bool // Terminate was called
		dead     bool // the mapping is being released: touch nothing
		termPend bool // a TERM waits for the outcome of the message being delivered
		termKind uint32
		termText string
		reqOut   producer
		respOut  producer
		pendReq  items // records waiting for room in reqOut
		pendResp items // and in respOut
		inflight flights
		nextID   uint32
		// The acknowledgement of the requests delivered, to send: set by
		// the receiver and flushed by it or by Terminate.
		ackID   uint32
		ackPend bool
		iov     iovecs // the direct path's (Transmit runs one at a time)
		// recent remembers where the direct path's latest large WRITEs
		// went, so that one into memory still in the cache is copied
		// through it.
		recent bigcopy.Recent
		// peerArenas are the peer's shared-allocator arenas mapped here,
		// by id: a copy into one, made under tx, never meets its
		// unmapping.
		peerArenas     map[uint32][]byte
		peerArenaBytes uint64 // their total size
	}

	// pmu is guarded by the provider's mu (p.mu).
	pmu struct {
		started    bool                // the link runs: its arenas may be handed out
		arenasSent map[uint32]struct{} // the ids of this side's arenas handed to the peer
		arenaQ     []arenaMsg          // arena messages not yet written to the socket
	}

	// sock serializes the writes of arena messages to the socket, made
	// without p.mu; failed says one failed and no more are written.
	sock struct {
		sync.Mutex
		failed bool
	}

	rx struct {
		reqIn    consumer
		respIn   consumer
		tm       verbs.Message    // the request being delivered
		rd       payloadReader    // its Payload
		sk       sinkWriter       // its Sink (READ)
		held     bool             // a request waits for a RECV (RNRWait at the peer)
		stopped  bool             // no more requests are taken (the connection failed)
		peerTerm bool             // the peer's TERM arrived
		iov      iovecs           // of the target's copies (payload_linux.go)
		acked    []*verbs.Message // completeUpTo's batch
	}

	hasPend    atomic.Bool  // tx.pendReq or tx.pendResp is not empty
	respPend   atomic.Bool  // tx.pendResp is not empty: the receiver takes no requests
	delivering atomic.Bool  // the receiver is inside Endpoint.Deliver
	stop       atomic.Bool  // the receiver is to stop
	peerGone   atomic.Bool  // the socket closed: the peer process ended or closed
	recvPosted atomic.Bool  // a RECV was posted: deliver the held request again
	refs       atomic.Int32 // users of the mapping; it is unmapped at zero
	// pidChecks counts the pidfd watcher's looks at the peer process:
	// after the first that finds it running, the watcher waits in the
	// runtime's poller (tests wait for it).
	pidChecks atomic.Int32
	st        counters
	done      chan struct{} // closed when the receiver has exited
	watchDone chan struct{} // closed when the watcher has exited
}

// counters are a link's statistics.
type counters struct {
	direct   atomic.Uint64 // one-sided operations done by this side with process_vm_*
	ringMsgs atomic.Uint64 // messages sent through the request ring
	inline   atomic.Uint64 // of which with their bytes inline
	pulls    atomic.Uint64 // messages whose bytes this side moved as target with process_vm_*
	wakes    atomic.Uint64 // futex sleeps of the receiver
	shared   atomic.Uint64 // one-sided operations done by this side with a plain copy (shared allocator)
}

// Compile-time checks.
var (
	_ verbs.Link         = (*link)(nil)
	_ verbs.PeerReporter = (*link)(nil)
)

// newLink builds a link over a mapping; start runs its goroutines.
func newLink(p *Provider, side int, m []byte, lo layout, conn *net.UnixConn) *link {
	l := &link{p: p, side: side, m: m, conn: conn, done: make(chan struct{}), watchDone: make(chan struct{}),
		pidfd: -1, pidDone: make(chan struct{})}
	l.tx.peerArenas = make(map[uint32][]byte)
	l.pmu.arenasSent = make(map[uint32]struct{})
	l.refs.Store(1)
	l.me, l.peer = sideAt(m, side), sideAt(m, 1-side)
	l.mine, l.theirs = tableAt(m, lo.table[side]), tableAt(m, lo.table[1-side])
	l.tx.reqOut.r = ringAt(m, lo.req[side], lo.reqSize)
	l.tx.respOut.r = ringAt(m, lo.resp[side], lo.respSize)
	l.rx.reqIn.r = ringAt(m, lo.req[1-side], lo.reqSize)
	l.rx.respIn.r = ringAt(m, lo.resp[1-side], lo.respSize)
	l.maxReq, l.maxResp = maxRecord(lo.reqSize), maxRecord(lo.respSize)
	if k := raceKeyFor((*header)(unsafe.Pointer(&m[0])).nonce); k != nil {
		l.tx.reqOut.r.race, l.tx.respOut.r.race, l.rx.reqIn.r.race, l.rx.respIn.r.race = k, k, k, k
	}
	l.rx.rd.l, l.rx.sk.l = l, l
	return l
}

// setEndpoint records the queue pair's end of the connection and what the
// link takes from its configuration.
func (l *link) setEndpoint(ep *verbs.Endpoint) {
	l.ep, l.pd, l.relaxed, l.busy = ep, ep.PD(), ep.RelaxedWritePlacement(), ep.BusyPoll()
}

// Peer returns the ends' addresses and the peer process's credentials,
// from the kernel (SO_PEERCRED). A connecting end has no address of its
// own: it is named "shm:@PID", its process's pid.
func (l *link) Peer() verbs.Peer { return l.addrs }

// start runs the receiver and the watchers.
func (l *link) start() {
	l.p.sendArenas(l)
	l.watchPeerProcess()
	go l.watch()
	go l.run()
}

// release drops a reference to the mapping, unmapping it at zero.
func (l *link) release() {
	if l.refs.Add(-1) == 0 {
		unix.Munmap(l.m)
	}
}

// acquire takes a reference to the mapping if it is still there.
func (l *link) acquire() bool {
	for {
		n := l.refs.Load()
		if n <= 0 {
			return false
		}
		if l.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
