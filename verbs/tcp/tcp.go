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
// once it has placed and delivered every message before it. An unsignaled
// SEND or WRITE, which has no completion of its own, leaves its fence to a
// later message, or to one sent alone a millisecond later. See
// docs/verbs.md, "The TCP provider", for the wire format, the checks and
// the completion rules.
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
)

// Option configures a Provider.
type Option func(*options)

type options struct {
	crc       bool
	handshake time.Duration
	linger    time.Duration
	segment   int
	cc        string
}

func defaultOptions() options {
	return options{crc: true, handshake: DefaultHandshakeTimeout, linger: DefaultLinger}
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
