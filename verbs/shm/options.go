// Package shm is the same-host provider of package verbs: it connects
// queue pairs in two processes of one Linux host.
//
// A connection is a Unix-domain socket, kept open for the connection's
// life, plus a shared mapping (a sealed memfd that the dialing side
// creates and passes over the socket with SCM_RIGHTS). The mapping holds
// four single-producer, single-consumer rings of variable-length records
// (a request ring and a response ring per direction), the words each side
// sleeps and wakes on, and each side's published registration table.
//
// Data moves by Linux cross-memory attach (process_vm_writev and
// process_vm_readv): an RDMA WRITE or READ with nothing in flight before
// it (for a queue pair with verbs.QPConfig.RelaxedWritePlacement, a WRITE
// with only SENDs in flight before it) is checked by the initiator against
// the peer's published registrations (verbs.RegionInfo.Check) and copied
// into or out of the peer's memory by the initiator alone, without the
// peer's CPU; other messages go through the request ring, small payloads
// inline, large ones as the initiator's iovecs that the target's receiver
// reads (or, for a READ, writes) directly. The rendezvous checks with a
// real call that cross-memory attach is permitted (ptrace policy or a
// seccomp profile may forbid it); when it is not, every byte travels
// inline through the rings, and the connection's statistics say so
// (Provider.Stats).
//
// Memory from the provider's shared allocator (Provider.Alloc) is a memfd
// of its own that the peers a region in it is published to receive over
// the socket and map: their RDMA WRITEs and READs into it are a plain
// copy, with no system call at all.
//
// Each side runs one receiver goroutine per connection, which spins
// briefly on empty rings and then sleeps on a futex in the shared mapping
// that the peer wakes only when the receiver said it sleeps (for a queue
// pair created with verbs.QPConfig.BusyPoll, it spins and never sleeps); one
// goroutine that reads the socket, to learn at once that the peer closed
// the connection or died; and, with cross-memory attach, one that waits on
// a pidfd of the peer process, so that no process_vm_writev goes to
// another process that got the pid of a peer that exited. They stop once
// the connection is terminated.
//
// Addresses have the form "shm:PATH", PATH being the Unix-socket path the
// listener binds.
//
// Who may connect: by default only processes of this process's user. Both
// sides learn the other's credentials from the kernel (SO_PEERCRED, as
// they were when the peer connected or listened), never from a message:
// a listener refuses a request from a process of another user before it
// sends anything but the refusal, and the request never reaches Accept;
// a dialer refuses a listener of another user before it sends anything.
// Both fail the dial with an error wrapping syscall.EACCES (and so
// os.ErrPermission). WithAllowUIDs admits more users, WithPeerCheck
// replaces the rule. The socket file's permissions are a first gate (a
// process needs write permission on it to connect); the check holds
// whatever they are.
//
// The provider is built on Linux only; elsewhere Listen and Dial fail.
package shm

import (
	"fmt"
	"time"

	"github.com/exsgo/exs/verbs"
)

// Scheme is the prefix of the provider's addresses.
const Scheme = "shm:"

// Backlog is how many connection requests a listener queues before it
// rejects more.
const Backlog = 128

// Defaults of the options.
const (
	// DefaultInlineMax is the largest SEND or WRITE payload copied
	// through the ring when cross-memory attach is available; larger ones
	// are read by the target from the initiator's memory.
	DefaultInlineMax = 16 << 10
	// DefaultDirectMin is the smallest RDMA WRITE that the initiator
	// copies itself with cross-memory attach (when nothing is in flight
	// before it); smaller ones go inline through the ring, which measured
	// as fast for one WRITE and twice as fast for batches up to 16 KiB
	// (docs/performance.md). READs take the direct path at any size.
	DefaultDirectMin = DefaultInlineMax + 1
	// DefaultSpin is how long a receiver spins on empty rings before it
	// sleeps.
	DefaultSpin = 50 * time.Microsecond
	// DefaultRequestRing and DefaultResponseRing are the sizes of the
	// rings of each direction.
	DefaultRequestRing  = 1 << 20
	DefaultResponseRing = 256 << 10
	// DefaultPeerArenaLimit is the most bytes of a peer's
	// shared-allocator memory that one connection maps
	// (WithPeerArenaLimit).
	DefaultPeerArenaLimit = 4 << 30
)

// Option configures a Provider. An option given a value out of its range
// makes New fail with an error wrapping verbs.ErrInvalid.
type Option func(*options) error

type options struct {
	inlineMax int
	directMin int
	spin      time.Duration
	noCMA     bool
	reqRing   uint64
	respRing  uint64
	peerArena uint64                 // bytes of the peer's arenas mapped per connection
	allowUIDs []int                  // users admitted besides this process's
	peerCheck func(verbs.Cred) error // replaces the rule on users if set
}

// newOptions applies opts to the defaults.
func newOptions(opts []Option) (options, error) {
	o := options{
		inlineMax: DefaultInlineMax,
		directMin: DefaultDirectMin,
		spin:      DefaultSpin,
		reqRing:   DefaultRequestRing,
		respRing:  DefaultResponseRing,
		peerArena: DefaultPeerArenaLimit,
	}
	for _, f := range opts {
		if err := f(&o); err != nil {
			return options{}, err
		}
	}
	if o.peerCheck != nil && len(o.allowUIDs) > 0 {
		return options{}, fmt.Errorf("shm: WithPeerCheck and WithAllowUIDs together: %w", verbs.ErrInvalid)
	}
	return o, nil
}

// invalid reports an option's bad value.
func invalid(what string, v any) error {
	return fmt.Errorf("shm: %s %v: %w", what, v, verbs.ErrInvalid)
}

// WithInlineMax sets the largest payload sent inline through the ring when
// cross-memory attach is available (default DefaultInlineMax). It must not
// be negative.
func WithInlineMax(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return invalid("inline maximum", n)
		}
		o.inlineMax = n
		return nil
	}
}

// WithDirectMin sets the smallest RDMA WRITE that the initiator copies
// itself (default DefaultDirectMin). A value above verbs.MaxMessage sends
// every one-sided operation, READs included, through the ring. It must
// not be negative.
func WithDirectMin(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return invalid("direct minimum", n)
		}
		o.directMin = n
		return nil
	}
}

// WithSpin sets how long a receiver spins before it sleeps (default
// DefaultSpin). Zero makes it sleep at once; negative is invalid. While more
// threads are runnable than the CPUs can run (CPUs shared with other work),
// spins are cut to 5 us, as exs's adaptive waits are. The receiver of a queue
// pair created with verbs.QPConfig.BusyPoll never sleeps.
func WithSpin(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return invalid("spin time", d)
		}
		o.spin = d
		return nil
	}
}

// WithoutCMA makes the provider refuse cross-memory attach, as if the
// system forbade it: every byte travels through the rings. For tests of
// that fallback.
func WithoutCMA() Option {
	return func(o *options) error { o.noCMA = true; return nil }
}

// WithRingSizes sets the sizes of the request and response rings of
// connections this provider dials: powers of two from 16 KiB to 64 MiB.
func WithRingSizes(request, response int) Option {
	return func(o *options) error {
		switch {
		case request < 0 || !validRingSize(uint64(request)):
			return invalid("request ring size", request)
		case response < 0 || !validRingSize(uint64(response)):
			return invalid("response ring size", response)
		}
		o.reqRing, o.respRing = uint64(request), uint64(response)
		return nil
	}
}

// WithPeerArenaLimit sets the most bytes of a peer's shared-allocator
// memory (Provider.Alloc) that one connection maps (default
// DefaultPeerArenaLimit); a connection also maps at most 4096 of the
// peer's arenas. The peer chooses what it hands over, so the limit bounds
// the address space a peer can take. An arena beyond it is not mapped and
// the connection goes on: operations on the regions in it take the path
// they take without the shared allocator (cross-memory attach or the
// ring). Zero maps none; negative is invalid.
func WithPeerArenaLimit(n int64) Option {
	return func(o *options) error {
		if n < 0 {
			return invalid("peer arena limit", n)
		}
		o.peerArena = uint64(n)
		return nil
	}
}

// WithAllowUIDs admits processes running as the users uids (their
// effective user ids, as SO_PEERCRED reports them) besides this process's
// own user: a listener accepts their requests and a dialer connects to
// their listeners. Given several times, the lists add up. A negative uid
// is invalid; so is the option together with WithPeerCheck.
//
// Admit only users trusted as much as this process's own: a peer writes
// into the connection's shared mapping and, with cross-memory attach
// (which the kernel allows only where ptrace would be), into the memory
// the application registers for remote access.
func WithAllowUIDs(uids ...int) Option {
	return func(o *options) error {
		for _, u := range uids {
			if u < 0 {
				return invalid("uid", u)
			}
		}
		o.allowUIDs = append(o.allowUIDs, uids...)
		return nil
	}
}

// WithPeerCheck replaces the rule on who may connect: check is given the
// peer process's credentials, as the kernel reports them (SO_PEERCRED:
// for a listener the dialing process, for a dialer the listening one),
// and admits the peer by returning nil. A peer it refuses is treated as
// one of another user by the default rule (see the package
// documentation); the dial fails with an error wrapping syscall.EACCES
// and the check's error. check is called from the goroutine of each
// rendezvous, possibly concurrently, and must not block for long. A nil
// check is invalid; so is the option together with WithAllowUIDs.
func WithPeerCheck(check func(verbs.Cred) error) Option {
	return func(o *options) error {
		if check == nil {
			return invalid("peer check", "nil")
		}
		o.peerCheck = check
		return nil
	}
}

// ConnStats describes one connection of a Provider.
type ConnStats struct {
	// QPNum is the number of the local queue pair.
	QPNum uint32
	// PeerPID is the process id of the peer, from the socket's
	// credentials.
	PeerPID int
	// CMA says whether cross-memory attach is used; if not, CMAError
	// says why (the probe's error, or that an option disabled it).
	CMA      bool
	CMAError string
	// Direct counts RDMA WRITEs and READs this side did itself with
	// cross-memory attach; RingMessages the messages it sent through the
	// request ring, Inline those of them with their bytes in the ring;
	// TargetCopies the messages whose bytes this side, as target, moved
	// with cross-memory attach; Sleeps the times its receiver slept;
	// Shared the RDMA WRITEs and READs this side did with a plain copy,
	// into or out of the peer's memory from the shared allocator
	// (Provider.Alloc).
	Direct, RingMessages, Inline, TargetCopies, Sleeps, Shared uint64
	// PeerArenas is the number of the peer's shared-allocator arenas
	// mapped by this side.
	PeerArenas int
}
