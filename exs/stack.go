package exs

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/shm"
	"github.com/exsgo/exs/verbs/tcp"
)

// defaultInproc is the in-process provider of stacks that name no other
// for the "inproc" scheme: shared, so that the stacks of one process can
// connect to each other. It holds only a registry of listeners.
var defaultInproc = inproc.New()

// defaultShm is the same-host provider of stacks that name no other for
// the "shm" scheme, shared by the stacks of the process. It holds no
// resources until a stack listens or connects through it (outside Linux
// its Listen and Dial fail).
var defaultShm = mustShm(shm.New())

// mustShm returns p. shm.New fails only for an option out of its range,
// and defaultShm has none.
func mustShm(p *shm.Provider, err error) *shm.Provider {
	if err != nil {
		panic(err)
	}
	return p
}

// shmScheme is the scheme of the same-host provider's addresses.
const shmScheme = "shm"

// defaultTCP is the provider across hosts of stacks that name no other for
// the "tcp" scheme (package verbs/tcp: iWARP over TCP), shared by the
// stacks of the process. It holds no resources until a stack listens or
// connects through it (outside Linux its Listen and Dial fail).
var defaultTCP = tcp.New()

// tcpScheme is the scheme of the TCP provider's addresses.
const tcpScheme = "tcp"

// defaultScheme is the scheme of addresses that have none.
const defaultScheme = "inproc"

// Stack is an instance of the library: it owns the verbs devices opened
// over its providers, the memory handles registered with it, its event
// queues and its sockets, and every goroutine they run. Create one with
// NewStack and Close it when done.
//
// A Stack is safe for concurrent use. The zero Stack is not usable.
type Stack struct {
	cfg  config
	log  *zap.Logger
	devs []*device // sorted by scheme; fixed after NewStack

	mu      sync.Mutex
	closed  bool
	sockets map[*Socket]struct{}
	queues  map[*Queue]struct{}
	handles map[*MHandle]struct{}
	wg      sync.WaitGroup
}

// device is a verbs device and its protection domain, for one scheme.
type device struct {
	idx    int // index in Stack.devs and in MHandle.mrs
	scheme string
	dev    *verbs.Device
	pd     *verbs.PD
}

// NewStack returns a stack configured by opts (see StackOption): every option
// may be given here, and the socket and queue options become the defaults
// of the stack's sockets and queues.
func NewStack(opts ...StackOption) (*Stack, error) {
	cfg := defaultConfig()
	if err := cfg.applyStackOptions(opts); err != nil {
		return nil, opErr("newstack", "", err)
	}
	for _, d := range []providerEntry{{defaultScheme, defaultInproc}, {shmScheme, defaultShm}, {tcpScheme, defaultTCP}} {
		if !slices.ContainsFunc(cfg.providers, func(e providerEntry) bool { return e.scheme == d.scheme }) {
			cfg.providers = append(cfg.providers, d)
		}
	}
	slices.SortFunc(cfg.providers, func(a, b providerEntry) int { return strings.Compare(a.scheme, b.scheme) })
	st := &Stack{
		cfg:     cfg,
		log:     cfg.logger,
		sockets: make(map[*Socket]struct{}),
		queues:  make(map[*Queue]struct{}),
		handles: make(map[*MHandle]struct{}),
	}
	for i, e := range cfg.providers {
		d, err := verbs.Open(e.p, verbs.WithLogger(cfg.logger))
		if err == nil {
			var pd *verbs.PD
			if pd, err = d.AllocPD(); err == nil {
				st.devs = append(st.devs, &device{idx: i, scheme: e.scheme, dev: d, pd: pd})
				continue
			}
			d.Close()
		}
		st.closeDevices()
		return nil, opErr("newstack", "", fmt.Errorf("open provider %q: %w", e.scheme, err))
	}
	return st, nil
}

// Close closes the stack: every socket is closed as by Socket.Close
// (operations still posted complete with an error matching ErrCanceled and
// ErrClosed; no close events are posted), Close waits for every goroutine
// the stack started, then deletes every queue (waking its waiters; events
// still queued stay dequeuable), deregisters every memory handle and closes
// the verbs devices. Close does not block on peers. A second Close returns
// ErrClosed.
func (st *Stack) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return opErr("close", "", ErrClosed)
	}
	st.closed = true
	socks := make([]*Socket, 0, len(st.sockets))
	for s := range st.sockets {
		socks = append(socks, s)
	}
	st.mu.Unlock()

	// Every socket counts as closing before any of them closes: the first
	// to go disconnects its peers, whose operations must then be canceled,
	// not reset.
	for _, s := range socks {
		s.closingA.Store(true)
	}
	for _, s := range socks {
		s.closeInternal()
	}
	st.wg.Wait()

	st.mu.Lock()
	qs := make([]*Queue, 0, len(st.queues))
	for q := range st.queues {
		qs = append(qs, q)
	}
	hs := make([]*MHandle, 0, len(st.handles))
	for h := range st.handles {
		hs = append(hs, h)
	}
	clear(st.queues)
	clear(st.handles)
	st.mu.Unlock()
	for _, q := range qs {
		q.delete(true)
	}
	for _, h := range hs {
		h.deregister()
	}
	st.closeDevices()
	st.log.Debug("stack closed")
	return nil
}

func (st *Stack) closeDevices() {
	for _, d := range st.devs {
		d.pd.Close()
		d.dev.Close()
	}
}

// spawn runs f in a goroutine the stack owns, unless the stack is closed.
func (st *Stack) spawn(f func()) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		f()
	}()
	return true
}

// addSocket records s, unless the stack is closed.
func (st *Stack) addSocket(s *Socket) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.sockets[s] = struct{}{}
	return true
}

func (st *Stack) removeSocket(s *Socket) {
	st.mu.Lock()
	delete(st.sockets, s)
	st.mu.Unlock()
}

// resolve returns the device for addr and the address in full: an address
// without a scheme gets the default one.
func (st *Stack) resolve(addr string) (*device, string, error) {
	if addr == "" {
		return nil, "", fmt.Errorf("%w: empty address", ErrInvalid)
	}
	scheme, _, ok := strings.Cut(addr, ":")
	if !ok {
		scheme, addr = defaultScheme, defaultScheme+":"+addr
	}
	for _, d := range st.devs {
		if d.scheme == scheme {
			return d, addr, nil
		}
	}
	return nil, "", fmt.Errorf("%w: no provider for address %q", ErrInvalid, addr)
}
