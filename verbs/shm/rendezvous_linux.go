package shm

// The rendezvous: a listener and its connection requests, the dialer, and
// the handshake that sets up a connection's shared mapping over its Unix
// socket.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/verbs"
)

// handshakeTimeout bounds the part of the rendezvous that happens before
// a request is queued for Accept.
const handshakeTimeout = 10 * time.Second

// maxHandshakes bounds the connections a listener waits for the request
// of at once.
const maxHandshakes = 4 * Backlog

// Handshake messages over the socket (little-endian):
//
//	hello   listener to dialer: magic u32, version u16, 0 u16, probe
//	        address u64, probe value u64
//	refusal listener to dialer, instead of the hello, to a dialer whose
//	        credentials it refuses (checkPeer): magic u32, version u16,
//	        1 u16; the listener then closes the socket
//	request dialer to listener, with the memfd: magic u32, version u16,
//	        RNR policy u8, cross-memory attach works u8, probe address u64,
//	        probe value u64, request ring size u64, response ring size u64,
//	        private data length u16, private data
//	reply   listener to dialer: magic u32, kind u8 (accept, reject), RNR
//	        policy u8, cross-memory attach works u8, 0 u8, private data
//	        length u16, private data
const (
	msgMagic     = 0x68736578 // "exsh"
	helloLen     = 24
	refusalLen   = 8
	helloRefused = 1 // in the hello's third field
	requestLen   = 50
	replyLen     = 10
	replyAccept  = 1
	replyReject  = 2
	maxHandshake = 1024
)

// probeAddr returns the address of the provider's probe word.
func (p *Provider) probeAddr() uint64 { return uint64(uintptr(unsafe.Pointer(&p.probe[0]))) }

// probePeer checks that cross-memory attach into pid works, by reading
// the peer's probe word. It returns "" or why it does not.
func (p *Provider) probePeer(pid int, addr, want uint64) string {
	if p.opts.noCMA {
		return "disabled by option"
	}
	var got [8]byte
	var v iovecs
	v.addLocal(got[:])
	v.addRemote(addr, 8)
	if _, err := v.transfer(pid, false, 8); err != nil {
		return "process_vm_readv: " + err.Error()
	}
	if binary.LittleEndian.Uint64(got[:]) != want {
		return "probe word mismatch"
	}
	return ""
}

// peerPID returns the pid of the socket's peer, from the kernel.
func peerPID(c *net.UnixConn) (int, error) {
	cred, err := peerCred(c)
	return cred.PID, err
}

// peerCred returns the credentials of the socket's peer process, from the
// kernel (SO_PEERCRED: as they were when it connected).
func peerCred(c *net.UnixConn) (verbs.Cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return verbs.Cred{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return verbs.Cred{}, err
	}
	if cerr != nil {
		return verbs.Cred{}, cerr
	}
	return verbs.Cred{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}

// checkPeer applies the rule on who may connect (WithAllowUIDs,
// WithPeerCheck) to the credentials of the process at the other end of a
// socket: peer is "dialer" or "listener". It returns an error wrapping
// syscall.EACCES if the peer is refused.
func (p *Provider) checkPeer(cred verbs.Cred, peer string) error {
	if p.opts.peerCheck != nil {
		if err := p.opts.peerCheck(cred); err != nil {
			return fmt.Errorf("shm: %s process %d (uid %d) refused: %w: %w", peer, cred.PID, cred.UID, syscall.EACCES, err)
		}
		return nil
	}
	if uid := os.Geteuid(); cred.UID != uid && !slices.Contains(p.opts.allowUIDs, cred.UID) {
		return fmt.Errorf("shm: %s process %d runs as uid %d, not as this process's %d nor an allowed one: %w",
			peer, cred.PID, cred.UID, uid, syscall.EACCES)
	}
	return nil
}

// Listen binds a Unix socket at the path of addr ("shm:PATH"). It returns
// an error wrapping syscall.EADDRINUSE if the path exists.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	path, err := parse(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen %s: %w", addr, err)
	}
	ln.SetUnlinkOnClose(true)
	l := &listener{p: p, addr: Scheme + path, ln: ln}
	l.hs = verbs.Handshakes[*net.UnixConn, *request]{
		Accept:    ln.AcceptUnix,
		Handshake: l.readRequest,
		// The listener closed or the backlog is full.
		Unqueued:      func(_ *net.UnixConn, r *request) { r.Reject(nil) },
		Abort:         func(c *net.UnixConn) { c.Close() },
		StopAccepting: func() { ln.Close() },
		// As many connections as that wait for their request: one more
		// is dropped at once (each costs a goroutine for up to
		// handshakeTimeout), as the TCP provider's listener does.
		Max:   maxHandshakes,
		Retry: time.Millisecond, // such as EMFILE: try again
	}
	l.hs.Start(Backlog)
	return l, nil
}

// listener accepts connections on its socket and runs each one's
// handshake in a goroutine of its own, queueing the requests for Accept.
type listener struct {
	p    *Provider
	addr string
	ln   *net.UnixListener
	hs   verbs.Handshakes[*net.UnixConn, *request]
}

// Addr returns "shm:PATH".
func (l *listener) Addr() string { return l.addr }

// Accept returns the next request.
func (l *listener) Accept(ctx context.Context) (verbs.LinkRequest, error) {
	r, err := l.hs.Next(ctx)
	if err != nil {
		return nil, fmt.Errorf("shm: accept on %s: %w", l.addr, err)
	}
	return r, nil
}

// Close stops listening, removes the socket, ends the handshakes in
// progress and rejects the queued requests.
func (l *listener) Close() error {
	if !l.hs.Close() {
		return verbs.ErrClosed
	}
	return nil
}

// readRequest sends hello and reads the request with its mapping.
func (l *listener) readRequest(c *net.UnixConn) (r *request, err error) {
	p := l.p
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	cred, err := peerCred(c)
	if err != nil {
		return nil, err
	}
	var b [maxHandshake]byte
	if err := p.checkPeer(cred, "dialing"); err != nil {
		c.Write(b[:putRefusal(b[:])])
		return nil, err
	}
	pid := cred.PID
	// The pidfd first, then the probe (pidfd_linux.go).
	pidfd, perr := peerPidfd(c, pid)
	defer func() {
		if r == nil && pidfd >= 0 {
			unix.Close(pidfd)
		}
	}()
	n := putHello(b[:], helloMsg{probeAddr: p.probeAddr(), probeVal: p.probe[0]})
	if _, err := c.Write(b[:n]); err != nil {
		return nil, err
	}
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
	fds := parseFDs(oob[:oobn])
	if err == nil && len(fds) != 1 {
		err = fmt.Errorf("shm: request with %d descriptors: %w", len(fds), errProtocol)
	}
	var req requestMsg
	if err == nil {
		req, err = parseRequest(b[:n])
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	fd := fds[0]
	defer unix.Close(fd)
	lo := newLayout(req.reqSize, req.respSize)
	m, err := mapPeer(fd, lo.total)
	if err != nil {
		return nil, err
	}
	if err := checkHeader(m, lo); err != nil {
		unix.Munmap(m)
		return nil, err
	}
	r = &request{
		l: l, conn: c, m: m, lo: lo, pid: pid, cred: cred, pidfd: pidfd, peerRNR: req.rnr,
		private: append([]byte(nil), req.private...),
	}
	r.cmaErr = p.probePeer(pid, req.probeAddr, req.probeVal)
	if r.cmaErr == "" {
		r.cmaErr = checkPeerProcess(pidfd, perr)
	}
	r.mineOK = r.cmaErr == ""
	if r.mineOK && !req.cma {
		r.cmaErr = "the peer cannot reach this process"
	}
	c.SetDeadline(time.Time{})
	return r, nil
}

// helloMsg is the listener's hello, decoded.
type helloMsg struct {
	probeAddr, probeVal uint64 // the listener's probe word
}

// putHello encodes a hello into b (helloLen bytes at least) and returns
// its length.
func putHello(b []byte, m helloMsg) int {
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	binary.LittleEndian.PutUint16(b[4:], protoVersion)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], m.probeAddr)
	binary.LittleEndian.PutUint64(b[16:], m.probeVal)
	return helloLen
}

// putRefusal encodes a refusal into b (refusalLen bytes at least) and
// returns its length.
func putRefusal(b []byte) int {
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	binary.LittleEndian.PutUint16(b[4:], protoVersion)
	binary.LittleEndian.PutUint16(b[6:], helloRefused)
	return refusalLen
}

// parseHello decodes the listener's first message: a hello, or a refusal
// of this process's credentials, reported as an error wrapping
// syscall.EACCES. Anything else is an error wrapping errProtocol.
func parseHello(b []byte) (helloMsg, error) {
	if len(b) < refusalLen || binary.LittleEndian.Uint32(b[0:]) != msgMagic {
		return helloMsg{}, fmt.Errorf("shm: listener's hello of %d bytes without the magic number: %w", len(b), errProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != protoVersion {
		return helloMsg{}, fmt.Errorf("shm: listener speaks version %d, not %d: %w", v, protoVersion, errProtocol)
	}
	code := binary.LittleEndian.Uint16(b[6:])
	switch {
	case len(b) == refusalLen && code == helloRefused:
		return helloMsg{}, fmt.Errorf("shm: the listener refuses this process (uid %d): %w", os.Geteuid(), syscall.EACCES)
	case len(b) != helloLen || code != 0:
		return helloMsg{}, fmt.Errorf("shm: listener's hello of %d bytes, code %d: %w", len(b), code, errProtocol)
	}
	return helloMsg{probeAddr: binary.LittleEndian.Uint64(b[8:]), probeVal: binary.LittleEndian.Uint64(b[16:])}, nil
}

// requestMsg is the dialer's request, decoded (the memfd travels beside
// it).
type requestMsg struct {
	rnr                 verbs.RNRPolicy // the dialer's policy
	cma                 bool            // the dialer can reach the listener's memory
	probeAddr, probeVal uint64          // the dialer's probe word
	reqSize, respSize   uint64          // the rings' sizes
	private             []byte          // a slice of the message
}

// putRequest encodes a request into b, which has room for requestLen +
// verbs.MaxPrivateData bytes, and returns its length.
func putRequest(b []byte, m requestMsg) int {
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	binary.LittleEndian.PutUint16(b[4:], protoVersion)
	b[6], b[7] = byte(m.rnr), 0
	if m.cma {
		b[7] = 1
	}
	binary.LittleEndian.PutUint64(b[8:], m.probeAddr)
	binary.LittleEndian.PutUint64(b[16:], m.probeVal)
	binary.LittleEndian.PutUint64(b[24:], m.reqSize)
	binary.LittleEndian.PutUint64(b[32:], m.respSize)
	binary.LittleEndian.PutUint16(b[40:], uint16(len(m.private)))
	clear(b[42:requestLen])
	return requestLen + copy(b[requestLen:], m.private)
}

// parseRequest decodes the dialer's request: the magic number and version,
// ring sizes the listener accepts (validRingSize), an RNR policy that
// exists, at most verbs.MaxPrivateData bytes of private data, and a length
// that is exactly that of the fields and the private data. Anything else is
// an error wrapping errProtocol.
func parseRequest(b []byte) (requestMsg, error) {
	if len(b) < requestLen || binary.LittleEndian.Uint32(b[0:]) != msgMagic {
		return requestMsg{}, fmt.Errorf("shm: request of %d bytes without the magic number: %w", len(b), errProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != protoVersion {
		return requestMsg{}, fmt.Errorf("shm: dialer speaks version %d, not %d: %w", v, protoVersion, errProtocol)
	}
	m := requestMsg{
		rnr: verbs.RNRPolicy(b[6]), cma: b[7] != 0,
		probeAddr: binary.LittleEndian.Uint64(b[8:]), probeVal: binary.LittleEndian.Uint64(b[16:]),
		reqSize: binary.LittleEndian.Uint64(b[24:]), respSize: binary.LittleEndian.Uint64(b[32:]),
	}
	plen := int(binary.LittleEndian.Uint16(b[40:]))
	switch {
	case !validRingSize(m.reqSize) || !validRingSize(m.respSize):
		return requestMsg{}, fmt.Errorf("shm: request for rings of %d and %d bytes: %w", m.reqSize, m.respSize, errProtocol)
	case plen > verbs.MaxPrivateData || len(b) != requestLen+plen:
		return requestMsg{}, fmt.Errorf("shm: request of %d bytes with %d bytes of private data: %w", len(b), plen, errProtocol)
	case !validRNR(m.rnr):
		return requestMsg{}, fmt.Errorf("shm: request with RNR policy %d: %w", b[6], errProtocol)
	}
	m.private = b[requestLen:]
	return m, nil
}

// checkHeader checks the header of a mapping received from a dialer
// against the request: the magic number, the version and the rings'
// sizes.
func checkHeader(m []byte, lo layout) error {
	h := (*header)(unsafe.Pointer(&m[0]))
	if h.magic != headerMagic || h.version != protoVersion || h.reqSize != lo.reqSize || h.respSize != lo.respSize {
		return fmt.Errorf("shm: peer's mapping has a header that does not match the request: %w", errProtocol)
	}
	return nil
}

// validRNR reports whether a peer's message names an RNR policy.
func validRNR(rnr verbs.RNRPolicy) bool { return rnr == verbs.RNRWait || rnr == verbs.RNRFail }

// replyMsg is the listener's reply, decoded.
type replyMsg struct {
	kind    byte            // replyAccept or replyReject
	rnr     verbs.RNRPolicy // the accepter's policy (accept only)
	cma     bool            // the listener can reach the dialer's memory
	private []byte          // a slice of the message
}

// putReply encodes a reply into b, which has room for replyLen +
// verbs.MaxPrivateData bytes, and returns its length.
func putReply(b []byte, m replyMsg) int {
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	b[4], b[5], b[6], b[7] = m.kind, byte(m.rnr), 0, 0
	if m.cma {
		b[6] = 1
	}
	binary.LittleEndian.PutUint16(b[8:], uint16(len(m.private)))
	return replyLen + copy(b[replyLen:], m.private)
}

// parseReply decodes the listener's reply, as strictly as the listener
// checks the request: an accept must carry a valid RNR policy (a reject
// carries none).
func parseReply(b []byte) (replyMsg, error) {
	if len(b) < replyLen || binary.LittleEndian.Uint32(b[0:]) != msgMagic {
		return replyMsg{}, errProtocol
	}
	plen := int(binary.LittleEndian.Uint16(b[8:]))
	if plen > verbs.MaxPrivateData || len(b) != replyLen+plen {
		return replyMsg{}, fmt.Errorf("shm: reply of %d bytes with %d bytes of private data: %w", len(b), plen, errProtocol)
	}
	m := replyMsg{kind: b[4], cma: b[6] != 0, private: b[replyLen:]}
	switch m.kind {
	case replyReject:
	case replyAccept:
		m.rnr = verbs.RNRPolicy(b[5])
		if !validRNR(m.rnr) {
			return replyMsg{}, fmt.Errorf("shm: listener's accept carries RNR policy %d: %w", b[5], errProtocol)
		}
	default:
		return replyMsg{}, fmt.Errorf("shm: reply of unknown kind %d: %w", m.kind, errProtocol)
	}
	return m, nil
}

func parseFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// request is a connection request whose mapping is mapped, waiting for
// Accept or Reject.
type request struct {
	l       *listener
	conn    *net.UnixConn
	m       []byte
	lo      layout
	pid     int
	cred    verbs.Cred
	pidfd   int // of the peer process, or -1; the link's once accepted
	peerRNR verbs.RNRPolicy
	private []byte
	cmaErr  string // "" if cross-memory attach works both ways
	mineOK  bool   // this side can reach the peer

	verbs.AnswerOnce
}

// PrivateData returns the request's private data.
func (r *request) PrivateData() []byte { return r.private }

// reply sends the answer.
func (r *request) reply(kind byte, rnr verbs.RNRPolicy, private []byte) error {
	var b [replyLen + verbs.MaxPrivateData]byte
	n := putReply(b[:], replyMsg{kind: kind, rnr: rnr, cma: r.mineOK, private: private})
	r.conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, err := r.conn.Write(b[:n])
	r.conn.SetWriteDeadline(time.Time{})
	return err
}

// Accept connects ep to the requester.
func (r *request) Accept(ep *verbs.Endpoint, private []byte) (verbs.Link, error) {
	if err := r.Answer(); err != nil {
		return nil, err
	}
	l := newLink(r.l.p, 1, r.m, r.lo, r.conn)
	l.setEndpoint(ep)
	l.peerPID, l.peerRNR = r.pid, r.peerRNR
	l.addrs = verbs.Peer{LocalAddr: r.l.addr, RemoteAddr: fmt.Sprintf("%s@%d", Scheme, r.pid), Cred: &r.cred}
	l.pidfd, r.pidfd = r.pidfd, -1
	l.cma, l.cmaErr = r.cmaErr == "", r.cmaErr
	r.l.p.addLink(l)
	if err := r.reply(replyAccept, ep.RNR(), private); err != nil {
		l.abandon()
		return nil, fmt.Errorf("shm: requester gone: %w: %w", syscall.ECONNABORTED, err)
	}
	l.start()
	return l, nil
}

// Reject answers the request with a rejection.
func (r *request) Reject(private []byte) error {
	if err := r.Answer(); err != nil {
		return err
	}
	err := r.reply(replyReject, 0, private)
	r.conn.Close()
	unix.Munmap(r.m)
	if r.pidfd >= 0 {
		unix.Close(r.pidfd)
		r.pidfd = -1
	}
	return err
}

// Dial connects to the listener at addr ("shm:PATH"). It returns an error
// wrapping syscall.ECONNREFUSED if no one listens there.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	path, err := parse(addr)
	if err != nil {
		return nil, nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("shm: connect %s: %w", addr, ctx.Err())
		}
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("shm: no listener at %s: %w", addr, syscall.ECONNREFUSED)
		}
		return nil, nil, fmt.Errorf("shm: connect %s: %w", addr, err)
	}
	uc := c.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Unix(1, 0)) })
	l, reply, err := p.dial(uc, ep, private)
	if !stop() && err == nil {
		// ctx ended while we finished: the deadline may be set.
		l.abandon()
		l, err = nil, ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, verbs.ErrRejected) {
			err = ctx.Err()
		}
		return nil, nil, fmt.Errorf("shm: connect %s: %w", addr, err)
	}
	l.start()
	return l, reply, nil
}

// dial runs the dialer's half of the rendezvous.
func (p *Provider) dial(c *net.UnixConn, ep *verbs.Endpoint, private []byte) (*link, []byte, error) {
	cred, err := peerCred(c)
	if err == nil {
		err = p.checkPeer(cred, "listening")
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	pid := cred.PID
	// The pidfd first, then the probe (pidfd_linux.go).
	pidfd, perr := peerPidfd(c, pid)
	fail := func(err error) (*link, []byte, error) {
		c.Close()
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		return nil, nil, err
	}
	var b [maxHandshake]byte
	n, err := c.Read(b[:])
	var hello helloMsg
	if err == nil {
		hello, err = parseHello(b[:n])
	}
	if err != nil {
		return fail(err)
	}
	cmaErr := p.probePeer(pid, hello.probeAddr, hello.probeVal)
	if cmaErr == "" {
		cmaErr = checkPeerProcess(pidfd, perr)
	}

	lo := newLayout(p.opts.reqRing, p.opts.respRing)
	fd, m, err := createMapping(lo.total)
	if err != nil {
		return fail(err)
	}
	h := (*header)(unsafe.Pointer(&m[0]))
	var nb [8]byte
	rand.Read(nb[:])
	*h = header{magic: headerMagic, version: protoVersion, reqSize: lo.reqSize, respSize: lo.respSize,
		nonce: binary.LittleEndian.Uint64(nb[:])}
	l := newLink(p, 0, m, lo, c)
	l.setEndpoint(ep)
	l.peerPID, l.pidfd = pid, pidfd
	l.addrs = verbs.Peer{LocalAddr: fmt.Sprintf("%s@%d", Scheme, os.Getpid()), Cred: &cred}
	p.addLink(l)

	n = putRequest(b[:], requestMsg{
		rnr: ep.RNR(), cma: cmaErr == "", probeAddr: p.probeAddr(), probeVal: p.probe[0],
		reqSize: lo.reqSize, respSize: lo.respSize, private: private,
	})
	_, _, err = c.WriteMsgUnix(b[:n], unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		l.abandon()
		return nil, nil, err
	}
	n, err = c.Read(b[:])
	if err != nil {
		l.abandon()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.DeadlineExceeded
		}
		return nil, nil, err
	}
	rep, err := parseReply(b[:n])
	if err != nil {
		l.abandon()
		return nil, nil, err
	}
	reply := append([]byte(nil), rep.private...)
	if rep.kind == replyReject {
		l.abandon()
		return nil, nil, &verbs.RejectError{PrivateData: reply}
	}
	l.peerRNR = rep.rnr
	switch {
	case cmaErr != "":
		l.cmaErr = cmaErr
	case !rep.cma:
		l.cmaErr = "the peer cannot reach this process"
	default:
		l.cma = true
	}
	return l, reply, nil
}
