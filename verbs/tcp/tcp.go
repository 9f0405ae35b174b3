// Package tcp is the provider of package verbs across hosts: it connects
// queue pairs over TCP, one connection per queue pair, speaking the IETF
// iWARP stack: MPA framing (RFC 5044) with CRC32c, DDP (RFC 5041) and RDMAP
// (RFC 5040), with immediate data as RFC 7306's Immediate Data message.
// Its traffic decodes with Wireshark's iwarp_mpa and iwarp_ddp_rdmap
// dissectors.
//
// Data is never copied by the provider: an initiator writes each FPDU's
// header, the payload straight from the registered memory and the CRC with
// one vectored write (writev), and the target reads the header, has the
// target queue pair check the STag, bounds and rights (verbs.Endpoint),
// and then reads the payload from the socket straight into the target
// region, computing the CRC on the way. A peer that breaks a rule (a bad
// STag, range or right, an MSN, opcode or version out of place, a bad CRC,
// a malformed frame) gets an iWARP Terminate naming the layer, error type
// and code, its queue pair moves to Error and the connection closes.
//
// iWARP has no acknowledgement at the RDMAP level, and a verbs SEND (and
// RDMA WRITE) completes only once the target has it. The provider learns
// it as iWARP applications do: with a zero-length RDMA Read (a fence) sent
// after the messages it confirms, whose response the target sends only
// once it has placed and delivered every message before it (an
// application READ's response confirms the same). An unsignaled SEND or
// WRITE, which has no completion of its own, handed over while its send
// queue is at most half full and holds no more work requests than its
// send CQ has free slots (verbs.Message.Unconfirmed), goes without a
// fence of its own: a later fence or READ response covers it, or a fence
// sent alone a millisecond later. A silent peer is found by the peer
// timeout (WithPeerTimeout). See docs/verbs.md, "The TCP provider", for
// the wire format, the checks and the completion rules.
//
// Each connection runs a receiver goroutine, which reads the socket and
// hands messages to the endpoint, and a writer goroutine, which takes over
// the writes the socket could not take at once: Link.Transmit writes in
// the caller's goroutine and never blocks.
//
// Addresses have the form "tcp:HOST:PORT" ("tcp:127.0.0.1:7000",
// "tcp:[::1]:0"); a listener on port 0 gets a port from the system and
// reports it in its address.
//
// The provider is built on Linux only; elsewhere Listen and Dial fail.
package tcp

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/exsgo/exs/verbs"
)

// Scheme is the prefix of the provider's addresses.
const Scheme = "tcp:"

// Backlog is how many connection requests whose MPA request frame arrived
// a listener keeps before Accept takes them; it closes the connections
// beyond (their Dial fails with ECONNREFUSED).
const Backlog = 128

// Defaults of the options.
const (
	// DefaultHandshakeTimeout bounds how long a listener waits for the
	// MPA request of a connection it accepted, and how long it takes to
	// write a reply.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultLinger bounds how long a connection that ends waits for the
	// peer to take its last bytes and close its side, before it closes
	// the socket anyway.
	DefaultLinger = 2 * time.Second
	// DefaultPeerTimeout is how long a connection's peer may leave data
	// unacknowledged, or an idle connection's keepalive probes
	// unanswered, before the connection is taken as dead
	// (WithPeerTimeout). An RDMA NIC's reliable connection gives up after
	// its local ACK timeout (4.096 us x 2^timeout) times its retry count
	// (at most 7): seconds with the usual settings; TCP alone gives up only after
	// net.ipv4.tcp_retries2 retransmissions (about 15 minutes) with data
	// outstanding, and never on an idle connection. 30 s rides out what
	// a live path does: TCP's retransmission timeout starts at 200 ms and
	// doubles, so 30 s is 7 retransmissions, which outlast a routing
	// change or a link flap of several seconds and the round trips of a
	// loaded intercontinental path; and it is short against the 15
	// minutes an application would otherwise hang.
	DefaultPeerTimeout = 30 * time.Second
)

// Option configures a Provider.
type Option func(*options)

type options struct {
	crc       bool
	handshake time.Duration
	linger    time.Duration
	segment   int
	cc        string
	peer      time.Duration
	lazy      time.Duration // lazyConfirm; tests lengthen it
}

// lazyConfirm is how long, at most, an unsignaled SEND or WRITE that went
// without a fence waits for one: if no signaled message, READ or message
// handed over with its send queue (or send CQ) fuller brought one
// meanwhile, a fence goes alone (fenceIdle). It bounds how long such a
// message holds its send queue slot and CQ reservation once delivered.
const lazyConfirm = time.Millisecond

func defaultOptions() options {
	return options{crc: true, handshake: DefaultHandshakeTimeout, linger: DefaultLinger, peer: DefaultPeerTimeout, lazy: lazyConfirm}
}

// WithoutCRC asks for no MPA CRC: the provider does not set the CRC flag
// in its MPA frames. CRCs are still used on connections whose peer asks
// for them (RFC 5044: CRC is used if either side asks).
func WithoutCRC() Option { return func(o *options) { o.crc = false } }

// WithHandshakeTimeout sets how long a listener waits for a connection's
// MPA request frame (DefaultHandshakeTimeout). A peer that sends none in
// time is disconnected.
func WithHandshakeTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.handshake = d
		}
	}
}

// WithLinger sets how long an ending connection waits for the peer to
// take its last bytes and close its side (DefaultLinger).
func WithLinger(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.linger = d
		}
	}
}

// WithPeerTimeout sets how long the peer of a connection may stay silent
// before the connection is taken as dead (DefaultPeerTimeout): a host
// that lost power or its network, or a path that drops everything, sends
// no FIN or reset, and without this its queue pairs would wait for TCP's
// retransmissions to give up (about 15 minutes: net.ipv4.tcp_retries2)
// with data outstanding, and forever on an idle connection. Each
// connection gets TCP_USER_TIMEOUT d (data unacknowledged for d aborts
// it) and TCP keepalive probes from d/2 of silence on, every d/6 (whole
// seconds, from 1 s to Linux's 32767 s), so that an idle connection is
// probed and aborted after about d too. The kernel aborts such a connection with
// ETIMEDOUT: the queue pair moves to Error, its work requests are
// flushed and its Err wraps verbs.ErrTerminated and syscall.ETIMEDOUT.
// (If a router reported the host unreachable meanwhile, the kernel's error
// is that report's, EHOSTUNREACH say, which the Err wraps as a lost
// connection, with ECONNRESET.)
//
// A peer that is alive but keeps its receive window shut (under
// verbs.RNRWait it holds a SEND for want of a RECV and reads nothing
// more) answers TCP's zero-window probes: while it does, the connection
// lifts its user timeout, which Linux would otherwise apply to the shut
// window too. A peer that vanishes while the window is shut is found once
// it leaves two probes in a row unanswered and the kernel sends the next:
// the probes' interval doubles while the window stays shut, so the longer
// it was shut, the later (3 s after for d = 2 s and a window shut 0.3 s
// before).
//
// 0 turns the detection off: no user timeout, no keepalive probes, the
// system's behaviour. A negative d is ignored.
func WithPeerTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.peer = d
		}
	}
}

// keepAlive returns the keepalive configuration of a peer timeout d:
// probes from d/2 of silence on, every d/6, in whole seconds (the unit
// of TCP_KEEPIDLE and TCP_KEEPINTVL), at least 1 s. With the user
// timeout set, Linux aborts the connection at the first probe time at
// which the peer has been silent for d and a probe went unanswered: an
// idle dead peer is found after d to d + d/6 (2 s for d = 2 s). The
// count matters only to a kernel that ignores the user timeout there.
// Each is bounded by what Linux takes (maxKeepIdle, maxKeepCount): net
// ignores a failed setting and leaves it and those after it at the
// system's defaults.
func keepAlive(d time.Duration) net.KeepAliveConfig {
	if d <= 0 {
		return net.KeepAliveConfig{}
	}
	idle := min(max((d/2).Truncate(time.Second), time.Second), maxKeepIdle)
	intvl := min(max((d/6).Truncate(time.Second), time.Second), maxKeepIdle)
	return net.KeepAliveConfig{
		Enable:   true,
		Idle:     idle,
		Interval: intvl,
		Count:    int(min(max(d-idle, 0)/intvl+1, maxKeepCount)),
	}
}

// Linux's bounds of TCP_KEEPIDLE and TCP_KEEPINTVL (MAX_TCP_KEEPIDLE,
// MAX_TCP_KEEPINTVL) and TCP_KEEPCNT (MAX_TCP_KEEPCNT).
const (
	maxKeepIdle  = 32767 * time.Second
	maxKeepCount = 127
)

// WithSegmentSize sets the largest ULPDU (DDP segment: header and payload)
// the provider sends, at least 64 bytes and at most 65535; larger
// messages take several FPDUs. By default it is derived from the TCP
// connection's maximum segment size, as RFC 5044's MULPDU.
func WithSegmentSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.segment = min(max(n, 64), maxULPDU)
		}
	}
}

// WithCongestionControl sets the TCP congestion control of the provider's
// connections (TCP_CONGESTION: "cubic", "bbr", one the kernel offers in
// net.ipv4.tcp_available_congestion_control). By default they use the
// system's (net.ipv4.tcp_congestion_control).
func WithCongestionControl(name string) Option { return func(o *options) { o.cc = name } }

// Compile-time checks.
var _ verbs.Provider = (*Provider)(nil)

// parseAddr returns the host:port of a "tcp:HOST:PORT" address.
func parseAddr(addr string) (string, error) {
	hp, ok := strings.CutPrefix(addr, Scheme)
	if !ok {
		return "", fmt.Errorf("%w: address %q is not %sHOST:PORT", verbs.ErrInvalid, addr, Scheme)
	}
	if _, _, err := net.SplitHostPort(hp); err != nil {
		return "", fmt.Errorf("%w: address %q is not %sHOST:PORT: %v", verbs.ErrInvalid, addr, Scheme, err)
	}
	return hp, nil
}

// addrOf returns the provider's address of a network address.
func addrOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	return Scheme + a.String()
}
