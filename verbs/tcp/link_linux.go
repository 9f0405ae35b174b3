package tcp

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/exsgo/exs/internal/spin"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Compile-time checks.
var (
	_ verbs.Link         = (*link)(nil)
	_ verbs.PeerReporter = (*link)(nil)
)

// maxCtlQueued bounds the control FPDUs (fence and zero-length READ
// responses, the Terminate) queued for the socket: past it the receiver
// stops reading, so that a peer that sends fences and reads nothing
// meets TCP back-pressure instead of making this side allocate.
const maxCtlQueued = 4096

// flushCtl is how many control FPDUs the receiver queues at most before
// it writes them.
const flushCtl = 64

// holdCheck is how often a receiver that holds a SEND for want of a RECV
// looks whether the peer closed the connection meanwhile.
const holdCheck = 50 * time.Millisecond

// Kinds of records: what the initiator sent and waits to hear of.
const (
	recSend  = 1 + iota // SEND, SEND_WITH_IMM
	recWrite            // RDMA_WRITE, RDMA_WRITE_WITH_IMM
	recRead             // RDMA_READ
	recFence            // the provider's zero-length READ (and the ready-to-receive)
)

// record is a message sent whose outcome is not known yet.
type record struct {
	m      *verbs.Message // nil for a fence
	kind   uint8
	hasMSN bool
	msnLo  uint32 // the QN 0 MSNs its untagged messages took
	msnHi  uint32
	rmsn   uint32 // QN 1 MSN (READ, fence)
	stag   uint32 // WRITE: target STag and offset; READ: Data Sink STag
	to     uint64
	n      uint64 // WRITE length, READ size
	got    uint64 // READ: response bytes received
}

// Kinds of queued FPDUs.
const (
	itemCtl  = iota // only the provider's bytes
	itemMsg         // refers to a Message's memory
	itemResp        // refers to a region the provider pinned (a READ response)
)

// txItem is one FPDU waiting for the socket.
type txItem struct {
	iov      [][]byte // what is left to write
	vec      [][]byte // backing of iov
	hdr      [2 + untaggedHdr + maxTermLen]byte
	tail     [8]byte
	kind     uint8
	started  bool         // some of it was written
	sumLater bool         // its CRC is still to be computed (sum)
	summing  bool         // ... by its Transmit, outside mu (sumOwnLocked)
	ulpdu    int          // its ULPDU length (for sum)
	fence    bool         // a fence's Read Request
	region   *mreg.Region // released once written (itemResp)
	respEnd  bool         // the last FPDU of a READ response
	priv     []byte       // its unwritten rest, copied at Terminate
}

// link is one connection.
//
// Its state falls into groups by what guards it:
//
//   - the fields at the top, set by newLink and never changed after, and
//     the channels by which the link's goroutines wait for each other;
//   - linkTx, under mu: the transmit side (the queue of FPDUs, the writes
//     to the socket, which are non-blocking system calls made under mu:
//     sending, send_linux.go), the records of messages in flight, and the
//     link's end (teardown_linux.go); cond (on mu) is broadcast when FPDUs
//     are written, when the receiver stops reading into a message's
//     memory, and when the link ends; wcond (on mu), the writer
//     goroutine's alone, is signalled when the socket took not all that
//     was queued, when the first FPDU lifts the gate, and when writing
//     fails or is to end (a cond of its own, so that the broadcasts of
//     every payload read do not wake the writer);
//   - linkRx, the receiver goroutine's alone (run, and the calls into the
//     endpoint it makes: receiving, recv_linux.go, and payload I/O,
//     payload_linux.go): the decoder and the state of the message being
//     received; no lock, no other goroutine touches it.
type link struct {
	p     *Provider
	c     *net.TCPConn
	fd    int
	ep    *verbs.Endpoint
	crc   bool
	pay   [2]int // payload bytes per FPDU: tagged, untagged (under mu)
	addrs verbs.Peer

	done       chan struct{} // closed once the socket is closed
	writerDone chan struct{}
	recvPosted chan struct{} // cap 1
	termC      chan struct{} // closed by Terminate

	mu    sync.Mutex
	cond  *sync.Cond
	wcond *sync.Cond // the writer's: blocked, gated, finish, txErr
	linkTx
	linkRx
}

// linkTx is the part of a link guarded by its mu.
type linkTx struct {
	// The queue of FPDUs and the writes to the socket.
	q           []*txItem
	qh          int
	free        []*txItem
	gather      [][]byte
	iov         iovecs
	gated       bool      // a passive side sends nothing before the peer's first FPDU (RFC 5044)
	writing     bool      // a goroutine is in flushLocked: it alone writes, mu released during each writev
	wEnd        int       // l.q[l.qh:wEnd]: the items of the writev in flight
	wwait       bool      // a goroutine waits for writing to end (waitWriteLocked)
	summers     int       // Transmits computing CRCs outside mu (sumOwnLocked)
	own         []*txItem // sumOwnLocked's scratch: Transmit's alone
	closing     bool      // the socket is about to be closed: nothing more is written
	blocked     bool      // the socket took not everything: the writer waits for room
	finish      bool      // the writer writes what is left, then shuts writing down
	txErr       error
	mssAuto     bool        // pay follows the connection's MSS (no WithSegmentSize)
	mssNext     time.Time   // when Transmit may read the MSS again
	respPending int         // READ responses with data not yet written
	ctlQueued   int         // control FPDUs queued (ctlAddedLocked)
	ctlPeak     int         // the most ctlQueued has been
	ctlHeld     bool        // control FPDUs wait for the receiver to be idle (or any write: cleared once the queue drains)
	lazy        bool        // messages went without a fence since the last fence or READ (lazyFenceLocked)
	lazyArmed   bool        // lazyTimer will send a fence
	lazyTimer   *time.Timer // fenceIdle; stopped once the link ends

	// The messages in flight.
	sendMSN uint32 // next QN 0 MSN
	readMSN uint32 // next QN 1 MSN
	sinkSeq uint32
	recs    []record
	rh      int

	// The link's end.
	term      bool // Terminate was called
	termErr   bool // ... with an error: a Terminate FPDU goes out
	peerEnded bool // the peer ended the connection: nothing to tell it
	aborted   bool // Provider.Close gave up on the link: no linger

	// The window's watch (window_linux.go).
	watch       *time.Timer
	utoLifted   bool      // the user timeout is lifted: the window is shut, the peer answers
	windowLifts int       // how many times it was
	rxBusy      bool      // the receiver reads into a message's memory or a WRITE's target
	rxTerm      *termInfo // the Terminate the receiver decided on
}

// linkRx is the part of a link the receiver goroutine alone touches.
type linkRx struct {
	dec decoder
	// input is the socket's reader as spinning goroutines see it: while
	// it is parked with input waiting, their spins end, so that the
	// runtime polls the network (internal/spin.Watch).
	input       *spin.Input
	expMSN      [3]uint32
	peerRNR     verbs.RNRPolicy
	rtrSeen     bool
	first       bool
	grace       bool        // Terminate came: only fences are still answered
	owed        bool        // a message was delivered after the last fence or READ answered
	sock        *sockReader // dec's reader until the grace (graceReader)
	pl          payload
	sink        respSink
	tm          verbs.Message
	wOpen       bool // a WRITE message is being received
	wDone       bool // the last message was a whole WRITE
	wKey        uint32
	wAddr, wLen uint64
	immPending  bool // an Immediate Data message binds to the next SEND
	immVal      uint32
	completions []*verbs.Message
	replyLikely bool // a SEND consumed a RECV since the receiver was last idle
	replySkip   int  // idles left that answer fences without waiting (awaitReplyLocked)
	ctl         [maxTermLen]byte
}

// newLink makes the link of an established connection; start runs it.
func newLink(p *Provider, c *net.TCPConn, ep *verbs.Endpoint, crc, passive bool) (*link, error) {
	fd, err := fdOf(c)
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	c.SetNoDelay(true)
	ulpdu := p.opts.segment
	if ulpdu == 0 {
		ulpdu = ulpduOf(maxSegment(fd))
	}
	l := &link{
		p:          p,
		c:          c,
		fd:         fd,
		ep:         ep,
		crc:        crc,
		pay:        [2]int{ulpdu - taggedHdr, ulpdu - untaggedHdr},
		addrs:      verbs.Peer{LocalAddr: addrOf(c.LocalAddr()), RemoteAddr: addrOf(c.RemoteAddr())},
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		recvPosted: make(chan struct{}, 1),
		termC:      make(chan struct{}),
		linkTx:     linkTx{gated: passive, sendMSN: 1, readMSN: 1, mssAuto: p.opts.segment == 0},
		linkRx: linkRx{
			expMSN:  [3]uint32{1, 1, 1},
			peerRNR: verbs.RNRFail, // iWARP's own rule, until the peer says otherwise
		},
	}
	l.cond = sync.NewCond(&l.mu)
	l.wcond = sync.NewCond(&l.mu)
	r, err := newSockReader(c)
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	r.idle = l.idle
	l.input = r.in
	l.dec = decoder{r: r, crc: crc}
	l.sock = r
	l.pl.l = l
	l.sink.l = l
	if !p.addLink(l) {
		return nil, errProviderClosed
	}
	// The first FPDU: ready to receive, with this side's RNR policy.
	params := uint64(rtrMagic | rtrVersion)
	if ep.RNR() == verbs.RNRFail {
		params |= rtrRNRFail
	}
	l.mu.Lock()
	l.pushFenceLocked(params)
	l.startWatchLocked()
	l.mu.Unlock()
	return l, nil
}

// start runs the link's goroutines and sends what is queued.
func (l *link) start() {
	go l.writer()
	go l.run()
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
}

// ulpduOf returns the largest ULPDU for a connection whose maximum
// segment size is mss (RFC 5044's MULPDU without markers: an FPDU, its
// length, ULPDU, padding and CRC, fits one segment), maxULPDU if mss is
// not known.
func ulpduOf(mss int) int {
	if mss <= 0 {
		return maxULPDU
	}
	return min(max((mss-8)&^3+2, 256), maxULPDU)
}

// mssRecheck is how often, at most, Transmit reads the connection's
// maximum segment size again before a message of several FPDUs.
const mssRecheck = time.Millisecond

// followMSSLocked sets the payload per FPDU from the connection's maximum
// segment size now, if it was last read more than mssRecheck ago. Linux
// bounds a new connection's segments to half the largest window the
// peer offered so far (32 KiB on loopback, against 64 KiB once the
// window grew), and the path's MTU may change later: FPDUs as large as
// the segments the connection sends now take half the system calls of
// both sides per byte.
func (l *link) followMSSLocked() {
	if !l.mssAuto {
		return
	}
	now := time.Now()
	if now.Before(l.mssNext) {
		return
	}
	l.mssNext = now.Add(mssRecheck)
	if mss := maxSegment(l.fd); mss > 0 {
		u := ulpduOf(mss)
		l.pay = [2]int{u - taggedHdr, u - untaggedHdr}
	}
}

// Peer returns the two ends' "tcp:IP:PORT" addresses. TCP tells nothing of
// the peer's process.
func (l *link) Peer() verbs.Peer { return l.addrs }
