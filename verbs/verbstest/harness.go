// Package verbstest is the conformance suite of verbs providers: Run
// drives a provider through the behaviour every provider must show
// (ordering, protection, error states and flushes, receiver-not-ready,
// connection management with private data, queue limits, concurrency).
//
// A test of the suite has two sides. The local side lives in the test
// process and uses package verbs directly over the provider under test.
// The far side is a Peer: an interface of plain method calls with plain
// arguments, so that it can live in another process (driven through a
// pipe by a helper the provider's tests start) as well as in the test
// process (NewLocalPeer). A provider's test calls Run with a function that
// makes a fresh Env for each test:
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, func(t *testing.T) verbstest.Env {
//			p := inproc.New()
//			return verbstest.Env{
//				Provider:   p,
//				Peer:       verbstest.NewLocalPeer(p, "inproc:peer"),
//				ListenAddr: "inproc:local",
//			}
//		})
//	}
//
// Every test, and every subtest of a table, runs under a deadline
// (Timeout): blocking calls get a context that ends then, and a watchdog
// panics with every goroutine's stack if a test is still running well
// after it, so that a hang becomes a failure.
// Every test checks for leaked goroutines with goleak once the Env's
// cleanups (registered with t.Cleanup by the Env's maker) have run.
package verbstest

import (
	"context"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Env is what one test runs against.
type Env struct {
	// Provider is the provider under test; the suite opens the local
	// verbs.Device over it.
	Provider verbs.Provider
	// Peer is the far side of the test's connections.
	Peer Peer
	// ListenAddr is an address at which the local side may listen and
	// that the Peer can reach.
	ListenAddr string
}

// Guard is the number of guard bytes the suite keeps on both sides of
// every region it registers, and GuardByte their value. A region's own
// bytes start as FillByte.
const (
	Guard     = 64
	GuardByte = 0xA5
	FillByte  = 0x5A
)

// QPSpec describes a queue pair a Peer creates. Zero fields take the
// defaults of verbs.QPConfig; CQDepth zero means 256. The peer uses one
// completion queue for both of its queues.
type QPSpec struct {
	SendDepth, RecvDepth  int
	RNR                   verbs.RNRPolicy
	CQDepth               int
	RelaxedWritePlacement bool // verbs.QPConfig.RelaxedWritePlacement
}

// Answer says how a Peer answers the next connection request.
type Answer struct {
	// Reject rejects the request; otherwise the peer accepts it with a
	// new queue pair of QP.
	Reject bool
	// PrivateData is sent with the accept or reject.
	PrivateData []byte
	// QP describes the accepting queue pair.
	QP QPSpec
}

// Peer is the far side of the suite's connections. It may live in another
// process. Its methods must be safe for concurrent use.
type Peer interface {
	// Listen starts listening and returns the address to dial.
	Listen(ctx context.Context) (string, error)
	// Serve arms the listener to answer the next connection request as
	// told, in the background, and returns at once.
	Serve(a Answer) error
	// Served waits for the outcome of the last Serve: the request's
	// private data and, if accepted, the accepting queue pair.
	Served(ctx context.Context) (PeerQP, []byte, error)
	// Connect creates a queue pair of spec and connects it to addr with
	// private, returning the accept's private data; a rejection returns
	// an error satisfying errors.Is(err, verbs.ErrRejected).
	Connect(ctx context.Context, addr string, spec QPSpec, private []byte) (PeerQP, []byte, error)
	// Close destroys everything the peer holds and stops its goroutines.
	Close() error
}

// PeerQP is a queue pair of the Peer with its own completion queue and
// protection domain.
type PeerQP interface {
	// Register allocates Guard+size+Guard bytes, fills the guards with
	// GuardByte and the region with FillByte, and registers the middle
	// size bytes with access.
	Register(size int, access mreg.Access) (PeerMR, error)
	// PostRecv posts a RECV with the given scatter list.
	PostRecv(wrID uint64, sgl []PeerSGE) error
	// PostSend posts a send work request.
	PostSend(wr PeerSendWR) error
	// Poll waits until n completions are there and returns them, in
	// order; with n == 0 it returns what is there without waiting. When
	// ctx ends first it returns what it has and ctx's error.
	Poll(ctx context.Context, n int) ([]verbs.WC, error)
	// State returns the queue pair's state.
	State() verbs.State
	// WaitError waits until the queue pair is in the Error state.
	WaitError(ctx context.Context) error
	// Disconnect disconnects the queue pair.
	Disconnect() error
	// Close destroys the queue pair (flushing it).
	Close() error
}

// PeerMR is a region registered by a PeerQP.
type PeerMR interface {
	Addr() uint64
	Len() int
	RKey() mreg.Key
	LKey() mreg.Key
	// Read returns the guards and the region: Guard+Len()+Guard bytes.
	Read() ([]byte, error)
	// Write copies p into the region at offset off.
	Write(off int, p []byte) error
	// Deregister deregisters the region (its keys die).
	Deregister() error
}

// PeerSGE names bytes [Off, Off+Len) of a PeerMR, with its lkey (or Key,
// if not zero, to use a wrong one).
type PeerSGE struct {
	MR       PeerMR
	Off, Len int
	Key      mreg.Key
}

// PeerSendWR is a send work request of a PeerQP.
type PeerSendWR struct {
	WRID       uint64
	Opcode     verbs.Opcode
	Signaled   bool
	Imm        uint32
	SGL        []PeerSGE
	RemoteAddr uint64
	RKey       mreg.Key
}
