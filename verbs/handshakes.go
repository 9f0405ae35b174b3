package verbs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Handshakes is the accepting half of a provider's listener over a socket:
// a loop that accepts connections and runs each one's handshake in a
// goroutine of its own, up to a bound, and queues the requests for Next
// (with AcceptNext) until Close. The same-host and TCP providers' listeners
// share it. Set the fields, then call Start.
type Handshakes[C interface {
	comparable
	io.Closer
}, R LinkRequest] struct {
	// Accept waits for the next connection; once the listening socket
	// is closed it fails with an error matching net.ErrClosed.
	Accept func() (C, error)
	// Handshake reads a connection's request. On error the connection
	// is closed.
	Handshake func(C) (R, error)
	// Unqueued takes a request that arrived but is not queued (the
	// listener closed, or the backlog is full).
	Unqueued func(C, R)
	// Abort makes a handshake in progress end, at Close.
	Abort func(C)
	// StopAccepting closes the listening socket, at Close.
	StopAccepting func()
	// Max bounds the handshakes in progress: a connection beyond it is
	// closed at once (each costs a goroutine until its handshake ends).
	Max int
	// Retry is the pause after a failed Accept (out of descriptors,
	// say) before the next.
	Retry time.Duration

	backlog chan R
	closed  chan struct{}
	wg      sync.WaitGroup // the loop and the handshakes

	mu       sync.Mutex
	isClosed bool
	conns    map[C]struct{} // handshakes in progress
}

// Start starts the loop, with room for backlog requests.
func (h *Handshakes[C, R]) Start(backlog int) {
	h.backlog = make(chan R, backlog)
	h.closed = make(chan struct{})
	h.conns = make(map[C]struct{})
	h.wg.Add(1)
	go h.loop() // owner: Close, which waits for it
}

// Next returns the next request, as AcceptNext does.
func (h *Handshakes[C, R]) Next(ctx context.Context) (LinkRequest, error) {
	return AcceptNext(ctx, h.backlog, h.closed)
}

func (h *Handshakes[C, R]) loop() {
	defer h.wg.Done()
	for {
		c, err := h.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-h.closed:
				return
			case <-time.After(h.Retry):
			}
			continue
		}
		h.mu.Lock()
		if h.isClosed {
			h.mu.Unlock()
			c.Close()
			return
		}
		if len(h.conns) >= h.Max {
			h.mu.Unlock()
			c.Close()
			continue
		}
		h.conns[c] = struct{}{}
		h.wg.Add(1)
		h.mu.Unlock()
		go h.handshake(c) // owner: Close, which waits for it
	}
}

// handshake runs one connection's handshake and queues its request.
func (h *Handshakes[C, R]) handshake(c C) {
	defer h.wg.Done()
	r, err := h.Handshake(c)
	h.mu.Lock()
	delete(h.conns, c)
	if err == nil && !h.isClosed {
		select {
		case h.backlog <- r:
			h.mu.Unlock()
			return
		default:
		}
	}
	h.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	h.Unqueued(c, r)
}

// Close stops the loop: it ends the handshakes in progress (Abort), closes
// the listening socket (StopAccepting), waits for the goroutines and
// rejects the queued requests. It returns false if the listener was closed
// already.
func (h *Handshakes[C, R]) Close() bool {
	h.mu.Lock()
	if h.isClosed {
		h.mu.Unlock()
		return false
	}
	h.isClosed = true
	close(h.closed)
	for c := range h.conns {
		h.Abort(c)
	}
	h.mu.Unlock()
	h.StopAccepting()
	h.wg.Wait()
	for {
		select {
		case r := <-h.backlog:
			r.Reject(nil)
		default:
			return true
		}
	}
}

// AnswerOnce lets a connection request be answered once, by Accept or
// Reject; the same-host and TCP providers' requests embed it.
type AnswerOnce struct {
	mu       sync.Mutex
	answered bool
}

// Answer marks the request answered. It fails with an error wrapping
// ErrInvalid if it was already.
func (a *AnswerOnce) Answer() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.answered {
		return fmt.Errorf("%w: connection request already answered", ErrInvalid)
	}
	a.answered = true
	return nil
}
