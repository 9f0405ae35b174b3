package verbs

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"go.uber.org/zap"
)

// Option configures a Device.
type Option interface {
	apply(*Device)
}

type optionFunc func(*Device)

func (f optionFunc) apply(d *Device) { f(d) }

// WithLogger makes the device log connection events (never per work
// request) to l. The default is zap.NewNop(). A nil l is ignored.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(d *Device) {
		if l != nil {
			d.log = l
		}
	})
}

// Device is an open verbs device: the context that protection domains,
// completion queues, queue pairs and listeners are created in, over one
// Provider. It is safe for concurrent use. The zero Device is not usable:
// call Open.
type Device struct {
	p   Provider
	log *zap.Logger
	// The provider's optional fault-injection abilities, or nil.
	regFilter  RegistrationFilter
	postFilter PostFilter

	mu        sync.Mutex
	closed    bool
	nextQPN   uint32
	qps       map[*QP]struct{}
	cqs       map[*CQ]struct{}
	listeners map[*Listener]struct{}
}

// Open opens a device over p. The device does not own p: closing the
// device does not close the provider.
func Open(p Provider, opts ...Option) (*Device, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil provider", ErrInvalid)
	}
	d := &Device{
		p:         p,
		log:       zap.NewNop(),
		qps:       make(map[*QP]struct{}),
		cqs:       make(map[*CQ]struct{}),
		listeners: make(map[*Listener]struct{}),
	}
	d.regFilter, _ = p.(RegistrationFilter)
	d.postFilter, _ = p.(PostFilter)
	for _, o := range opts {
		o.apply(d)
	}
	return d, nil
}

// Provider returns the provider the device was opened over.
func (d *Device) Provider() Provider { return d.p }

// Close closes the device's listeners, destroys its queue pairs (flushing
// their outstanding work requests, see QP.Close) and closes its completion
// queues, whose completions stay pollable until drained. Protection
// domains and memory regions hold no resources beyond memory and are left
// to their owner. Close does not block on the peer. A second Close returns
// ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	ls := slices.Collect(maps.Keys(d.listeners))
	qps := slices.Collect(maps.Keys(d.qps))
	d.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, qp := range qps {
		qp.Close()
	}
	d.mu.Lock()
	cqs := slices.Collect(maps.Keys(d.cqs))
	d.mu.Unlock()
	for _, cq := range cqs {
		cq.Close()
	}
	return nil
}

// add registers an object with the device; it fails once the device is
// closed.
func (d *Device) add(f func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("verbs: device: %w", ErrClosed)
	}
	f()
	return nil
}

// AllocPD allocates a protection domain: a table of memory regions that
// the device's queue pairs created in it may use.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbs: device: %w", ErrClosed)
	}
	return newPD(d), nil
}
