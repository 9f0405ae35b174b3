package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/exsgo/exs/verbs"
)

// Compile-time checks.
var (
	_ verbs.LinkListener = (*listener)(nil)
	_ verbs.LinkRequest  = (*request)(nil)
	_ io.Closer          = (*Provider)(nil)
)

// Provider is the TCP provider. It is safe for concurrent use. New returns
// one; the zero Provider is not usable.
type Provider struct {
	opts options

	mu        sync.Mutex
	closed    bool
	listeners map[*listener]struct{}
	links     map[*link]struct{}
}

// New returns a provider configured by opts.
func New(opts ...Option) *Provider {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	return &Provider{opts: o, listeners: make(map[*listener]struct{}), links: make(map[*link]struct{})}
}

// errProviderClosed reports a Listen or Dial after Close.
var errProviderClosed = fmt.Errorf("tcp: provider closed: %w", verbs.ErrClosed)

// Close closes the provider's listeners and waits, at most the linger
// time and the handshake timeout, for the goroutines of its connections
// to end; connections still open are closed. Close is for the end of a
// process or a test: Listen and Dial fail afterwards.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return verbs.ErrClosed
	}
	p.closed = true
	lns := slices.Collect(maps.Keys(p.listeners))
	links := slices.Collect(maps.Keys(p.links))
	p.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	// Past the deadline, every connection still open is aborted (a
	// timer's channel fires once: it cannot be waited for per link).
	deadline := time.NewTimer(p.opts.linger + p.opts.handshake)
	defer deadline.Stop()
	expired := false
	for _, l := range links {
		if !expired {
			select {
			case <-l.done:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		l.abort()
		<-l.done
	}
	return nil
}

func (p *Provider) addLink(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Provider) removeLink(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// Listen listens at addr ("tcp:HOST:PORT"; port 0 takes a free port, which
// the listener's Addr reports). It returns an error wrapping
// syscall.EADDRINUSE if the address is taken.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	hp, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errProviderClosed
	}
	// Accepted connections inherit the user timeout from the listening
	// socket and get the keepalive configuration from Accept.
	lc := net.ListenConfig{Control: p.control, KeepAlive: -1, KeepAliveConfig: keepAlive(p.opts.peer)}
	nl, err := lc.Listen(context.Background(), "tcp", hp)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	l := &listener{p: p, ln: nl.(*net.TCPListener), addr: addrOf(nl.Addr())}
	l.hs = verbs.Handshakes[*net.TCPConn, *request]{
		Accept:    l.ln.AcceptTCP,
		Handshake: l.handshake,
		// The listener closed or the backlog is full: the connection
		// closes.
		Unqueued:      func(c *net.TCPConn, _ *request) { c.Close() },
		Abort:         func(c *net.TCPConn) { c.SetDeadline(time.Now()) },
		StopAccepting: func() { l.ln.Close() },
		Max:           maxHandshakes,
		// A transient failure (out of descriptors, say): try again a
		// little later, as net/http does.
		Retry: 5 * time.Millisecond,
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		nl.Close()
		return nil, errProviderClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	l.hs.Start(Backlog)
	return l, nil
}

// maxHandshakes bounds the connections a listener waits for the MPA
// request of at once.
const maxHandshakes = 4 * Backlog

// listener is a listening socket and the requests whose MPA request frame
// arrived.
type listener struct {
	p    *Provider
	ln   *net.TCPListener
	addr string
	hs   verbs.Handshakes[*net.TCPConn, *request]
}

// Addr returns "tcp:IP:PORT", with the port the listener got.
func (l *listener) Addr() string { return l.addr }

// handshake reads a connection's MPA request frame, within the handshake
// timeout, for Accept. A frame that breaks RFC 5044 (or asks for markers,
// which the provider does not send) gets a reply with the reject bit and
// no private data.
func (l *listener) handshake(c *net.TCPConn) (*request, error) {
	c.SetDeadline(time.Now().Add(l.p.opts.handshake))
	buf := new([mpaHdrLen + verbs.MaxPrivateData]byte)
	f, err := readMPA(c, false, buf)
	if err == nil && f.markers {
		err = fmt.Errorf("%w: markers requested", errMPA)
	}
	if err != nil {
		if errors.Is(err, errMPA) {
			c.Write(appendMPA(nil, mpaFrame{reply: true, reject: true, rev: mpaRevision}))
			closeGently(c)
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return &request{l: l, c: c, crc: f.crc, private: append([]byte(nil), f.private...)}, nil
}

// Accept returns the next request.
func (l *listener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := l.hs.Next(ctx)
	if err != nil {
		return nil, fmt.Errorf("tcp: accept on %s: %w", l.addr, err)
	}
	return r, nil
}

// Close stops listening: it rejects the queued requests, drops the
// connections whose request has not arrived, and waits for its goroutines.
func (l *listener) Close() error {
	if !l.hs.Close() {
		return fmt.Errorf("tcp: close %s: %w", l.addr, verbs.ErrClosed)
	}
	l.p.mu.Lock()
	delete(l.p.listeners, l)
	l.p.mu.Unlock()
	return nil
}

// request is a connection whose MPA request frame arrived.
type request struct {
	l       *listener
	c       *net.TCPConn
	crc     bool // the requester asked for CRCs
	private []byte

	verbs.AnswerOnce
}

// PrivateData returns the request's private data.
func (r *request) PrivateData() []byte { return r.private }

// Accept sends the MPA reply and starts the connection's link. It fails
// with an error wrapping syscall.ECONNABORTED if the requester is gone:
// it closed the connection without a byte after its request (it gave up).
// A requester that ended its stream after sending messages is accepted,
// and its messages are delivered.
func (r *request) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	if err := r.Answer(); err != nil {
		return nil, err
	}
	p := r.l.p
	crc := r.crc || p.opts.crc
	c := r.c
	c.SetWriteDeadline(time.Now().Add(p.opts.handshake))
	_, err := c.Write(appendMPA(nil, mpaFrame{reply: true, crc: crc, rev: mpaRevision, private: private}))
	c.SetWriteDeadline(time.Time{})
	if err == nil {
		if fd, ferr := fdOf(c); ferr != nil {
			err = ferr
		} else if peerClosed(fd) && !hasData(fd) {
			// A requester that gave up closed without a byte after its
			// request; one that read this reply, sent its messages and
			// ended in order left them to read, before its end.
			err = errors.New("the requester closed the connection")
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("tcp: accept from %s: %w (%w)", addrOf(c.RemoteAddr()), syscall.ECONNABORTED, err)
	}
	l, err := newLink(p, c, ep, crc, true)
	if err != nil {
		c.Close()
		return nil, err
	}
	l.start()
	return l, nil
}

// Reject sends an MPA reply with the reject bit and private, and closes
// the connection.
func (r *request) Reject(private []byte) error {
	if err := r.Answer(); err != nil {
		return err
	}
	c := r.c
	c.SetWriteDeadline(time.Now().Add(r.l.p.opts.handshake))
	_, err := c.Write(appendMPA(nil, mpaFrame{reply: true, reject: true, rev: mpaRevision, private: private}))
	closeGently(c)
	if err != nil {
		return fmt.Errorf("tcp: reject %s: %w", addrOf(c.RemoteAddr()), err)
	}
	return nil
}

// Dial connects to the listener at addr, sends the MPA request frame with
// private and waits for the reply, all within ctx. A reply with the reject
// bit is a *verbs.RejectError; a listener that closes the connection
// before it replies (its backlog is full, or it is closing) and an address
// nobody listens at are errors wrapping syscall.ECONNREFUSED; a reply that
// breaks RFC 5044 gets a Terminate and is an error wrapping
// syscall.ECONNABORTED.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	hp, err := parseAddr(addr)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, nil, errProviderClosed
	}
	d := net.Dialer{Control: p.control, KeepAlive: -1, KeepAliveConfig: keepAlive(p.opts.peer)}
	nc, err := d.DialContext(ctx, "tcp", hp)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: connect %s: %w", addr, err)
	}
	c := nc.(*net.TCPConn)
	fail := func(err error) (verbs.Link, []byte, error) {
		c.Close()
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("tcp: connect %s: %w", addr, ctx.Err())
		}
		return nil, nil, err
	}
	// ctx's end interrupts the exchange (and is seen as ctx.Err() then).
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(appendMPA(nil, mpaFrame{crc: p.opts.crc, rev: mpaRevision, private: private})); err != nil {
		return fail(fmt.Errorf("tcp: connect %s: %w", addr, err))
	}
	buf := new([mpaHdrLen + verbs.MaxPrivateData]byte)
	f, err := readMPA(c, true, buf)
	if err == nil && f.markers && !f.reject {
		err = fmt.Errorf("%w: markers requested", errMPA)
	}
	if !stop() {
		return fail(nil) // ctx is done
	}
	if err != nil {
		var we *wireError
		switch {
		case errors.As(err, &we):
			// The reply breaks RFC 5044: say so with a Terminate.
			writeTerminate(c, f.crc || p.opts.crc, &termInfo{layer: we.layer, etype: we.etype, code: we.code})
			return fail(fmt.Errorf("tcp: connect %s: %w: %w", addr, syscall.ECONNABORTED, err))
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
			return fail(fmt.Errorf("tcp: connect %s: closed before the MPA reply: %w", addr, syscall.ECONNREFUSED))
		}
		return fail(fmt.Errorf("tcp: connect %s: %w", addr, err))
	}
	if f.reject {
		c.Close()
		return nil, nil, &verbs.RejectError{PrivateData: append([]byte(nil), f.private...)}
	}
	c.SetDeadline(time.Time{})
	l, err := newLink(p, c, ep, f.crc || p.opts.crc, false)
	if err != nil {
		return fail(err)
	}
	reply := append([]byte(nil), f.private...)
	l.start()
	return l, reply, nil
}

// control sets the options of a socket before it listens or connects (an
// accepted socket inherits them from its listener): the congestion
// control and the peer timeout's TCP_USER_TIMEOUT, which covers the MPA
// handshake too. The keepalive probes are set by net (Dialer and
// ListenConfig's KeepAliveConfig).
func (p *Provider) control(_, _ string, c syscall.RawConn) error {
	var err error
	cerr := c.Control(func(fd uintptr) {
		if p.opts.cc != "" {
			if err = setCongestion(int(fd), p.opts.cc); err != nil {
				err = fmt.Errorf("tcp: congestion control %q: %w", p.opts.cc, err)
				return
			}
		}
		if p.opts.peer > 0 {
			if err = setUserTimeout(int(fd), p.opts.peer); err != nil {
				err = fmt.Errorf("tcp: peer timeout %v: %w", p.opts.peer, err)
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// closeGently closes a connection whose reply was written: it shuts its
// writing side down and reads what the peer still sends (at most 64 KiB,
// for at most 100 ms) before it closes, so that unread bytes do not make
// the close a reset that could destroy the reply before the peer reads it.
func closeGently(c *net.TCPConn) {
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	c.Close()
}

// writeTerminate writes one Terminate FPDU on a connection that has no
// link (a failed set-up), with a short deadline.
func writeTerminate(c *net.TCPConn, crc bool, t *termInfo) {
	var b [2 + untaggedHdr + maxTermLen + 8]byte
	payload := appendTerm(b[2+untaggedHdr:2+untaggedHdr], t)
	h := putUntagged(b[:], opTerminate, true, qnTerm, 1, 0, len(payload))
	n := len(h) + len(payload)
	sum := uint32(0)
	if crc {
		sum = crcOf(b[:n])
	}
	tr := trailer(b[n:], sum, n-2, crc)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(b[:n+len(tr)])
}
