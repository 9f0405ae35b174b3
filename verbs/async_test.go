package verbs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
	"github.com/exsgo/exs/verbs/verbstest"
)

// asyncProvider wraps the in-process provider so that Transmit delivers
// at once but reports the outcome later, from a goroutine the provider
// owns, in batches reported in reverse order: it exercises
// Endpoint.Complete, completions reported out of order, work requests
// flushed while the provider still holds them, and late completions after
// a connection ended. Failures, receiver-not-ready included, are still
// reported synchronously (Transmit may do so): the target terminates the
// connection as it refuses a message, and the refused message's outcome
// must reach the initiator before the termination does.
type asyncProvider struct {
	wrapProvider
	work chan completion
	wg   sync.WaitGroup
	late atomic.Int64 // completions reported after their link was terminated
}

type completion struct {
	l   *asyncLink
	m   *verbs.Message
	err error
}

var _ verbs.Link = (*asyncLink)(nil)

func newAsyncProvider() *asyncProvider {
	p := &asyncProvider{work: make(chan completion, 1024)}
	p.wrapProvider = wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, ep *verbs.Endpoint) verbs.Link {
		return &asyncLink{p: p, inner: l, ep: ep}
	}}
	p.wg.Go(p.run)
	return p
}

// run reports completions, up to 4 at a time in reverse order.
func (p *asyncProvider) run() {
	batch := make([]completion, 0, 4)
	for c := range p.work {
		batch = append(batch[:0], c)
	fill:
		for len(batch) < cap(batch) {
			select {
			case c, ok := <-p.work:
				if !ok {
					break fill
				}
				batch = append(batch, c)
			default:
				break fill
			}
		}
		for i := len(batch) - 1; i >= 0; i-- {
			c := batch[i]
			if c.l.closed.Load() {
				p.late.Add(1)
			}
			c.l.ep.Complete(c.m, c.err)
		}
	}
}

// Close stops the completion goroutine.
func (p *asyncProvider) Close() {
	close(p.work)
	p.wg.Wait()
}

// wrapProvider is a provider whose links are those of inner, wrapped.
type wrapProvider struct {
	inner verbs.Provider
	wrap  func(l verbs.Link, ep *verbs.Endpoint) verbs.Link
}

var (
	_ verbs.Provider     = (*wrapProvider)(nil)
	_ verbs.LinkListener = (*wrapListener)(nil)
	_ verbs.LinkRequest  = (*wrapRequest)(nil)
)

func (p *wrapProvider) Listen(addr string) (verbs.LinkListener, error) {
	l, err := p.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &wrapListener{p: p, LinkListener: l}, nil
}

func (p *wrapProvider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	l, rep, err := p.inner.Dial(ctx, addr, ep, private)
	if err != nil {
		return nil, nil, err
	}
	return p.wrap(l, ep), rep, nil
}

type wrapListener struct {
	p *wrapProvider
	verbs.LinkListener
}

func (l *wrapListener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := l.LinkListener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &wrapRequest{p: l.p, LinkRequest: r}, nil
}

type wrapRequest struct {
	p *wrapProvider
	verbs.LinkRequest
}

func (r *wrapRequest) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	l, err := r.LinkRequest.Accept(ep, private)
	if err != nil {
		return nil, err
	}
	return r.p.wrap(l, ep), nil
}

type asyncLink struct {
	p      *asyncProvider
	inner  verbs.Link
	ep     *verbs.Endpoint
	closed atomic.Bool
}

func (l *asyncLink) Transmit(m *verbs.Message) (bool, error) {
	if l.closed.Load() {
		return true, verbs.ErrClosed
	}
	_, err := l.inner.Transmit(m) // the inner provider delivers at once
	if err != nil {
		// A refusal (or receiver-not-ready) is reported at once: the
		// target has already terminated the connection, and the outcome
		// of the refused message must be known before that (see
		// Endpoint.Terminated).
		return true, err
	}
	l.p.work <- completion{l: l, m: m, err: err}
	return false, nil
}

func (l *asyncLink) RecvPosted() { l.inner.RecvPosted() }

func (l *asyncLink) Terminate(cause error) {
	l.closed.Store(true)
	l.inner.Terminate(cause)
}

// TestAsyncConformance runs the conformance suite over the asynchronous
// wrapper.
func TestAsyncConformance(t *testing.T) {
	var late int64
	verbstest.Run(t, func(t *testing.T) verbstest.Env {
		p := newAsyncProvider()
		t.Cleanup(func() {
			p.Close()
			late += p.late.Load()
		})
		return verbstest.Env{
			Provider:   p,
			Peer:       verbstest.NewLocalPeer(p, "inproc:peer"),
			ListenAddr: "inproc:local",
		}
	})
	t.Logf("%d completions were reported after their connection ended", late)
}
