//go:build linux

package shm

// A hostile peer that speaks the provider's rendezvous and ring format by
// hand, against a victim provider: a listener with guarded regions and an
// honest connection from another provider, checked after every attack.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/verbstest"
)

// hostileTimeout bounds every wait of the hostile-peer tests.
const hostileTimeout = 10 * time.Second

// guarded is a registered region with verbstest.Guard bytes of
// verbstest.GuardByte on both sides, and the bytes its buffer should hold.
type guarded struct {
	name string
	buf  []byte // guard, region, guard
	want []byte
	mr   *verbs.MR
}

func (g *guarded) region() []byte { return g.buf[verbstest.Guard : len(g.buf)-verbstest.Guard] }

// expect records that the region's bytes at off are now b.
func (g *guarded) expect(off int, b []byte) { copy(g.want[verbstest.Guard+off:], b) }

// newGuarded registers n bytes of pd with access, filled with a pattern,
// between guards.
func newGuarded(t testing.TB, pd *verbs.PD, name string, n int, access mreg.Access) *guarded {
	t.Helper()
	g := &guarded{name: name, buf: make([]byte, verbstest.Guard+n+verbstest.Guard)}
	for i := range g.buf {
		g.buf[i] = verbstest.GuardByte
	}
	for i := range g.region() {
		g.region()[i] = byte(i*13 + 1)
	}
	g.want = bytes.Clone(g.buf)
	var err error
	if g.mr, err = pd.RegisterMR(g.region(), access); err != nil {
		t.Fatal(err)
	}
	return g
}

// check reports a byte of the buffer that differs from what it should
// hold: in the guards, memory outside the region was written.
func (g *guarded) check(t testing.TB) {
	t.Helper()
	for i := range g.buf {
		if g.buf[i] != g.want[i] {
			where := "the region"
			if i < verbstest.Guard || i >= len(g.buf)-verbstest.Guard {
				where = "a GUARD"
			}
			t.Errorf("%s: byte %d (in %s) is %#x, want %#x", g.name, i-verbstest.Guard, where, g.buf[i], g.want[i])
			return
		}
	}
}

// accepted is a connection the victim's listener accepted.
type accepted struct {
	qp      *verbs.QP
	cq      *verbs.CQ
	private string
}

// victim is a provider under attack.
type victim struct {
	p        *Provider
	dev      *verbs.Device
	pd       *verbs.PD
	addr     string
	ln       *verbs.Listener
	accepted chan accepted
	regions  []*guarded
	w        *guarded // RemoteWrite and RemoteRead
	ro       *guarded // RemoteRead only
	loc      *guarded // local only
	rbuf     *guarded // RECV buffer
	dead     *verbs.MR
	honest   *honest
}

func newVictim(t testing.TB, opts ...Option) *victim {
	t.Helper()
	dir, err := os.MkdirTemp("", "shmh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	v := &victim{p: mustNew(opts...), addr: Scheme + dir + "/v", accepted: make(chan accepted, 16)}
	if v.dev, err = verbs.Open(v.p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.dev.Close() })
	v.pd, _ = v.dev.AllocPD()
	v.w = newGuarded(t, v.pd, "remote-write region", 4096, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	v.ro = newGuarded(t, v.pd, "remote-read region", 4096, mreg.RemoteRead)
	v.loc = newGuarded(t, v.pd, "local region", 4096, mreg.LocalWrite)
	v.rbuf = newGuarded(t, v.pd, "receive buffer", 256, mreg.LocalWrite)
	v.regions = []*guarded{v.w, v.ro, v.loc, v.rbuf}
	// A region registered and deregistered: its keys are dead.
	if v.dead, err = v.pd.RegisterMR(make([]byte, 64), mreg.LocalWrite|mreg.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	if err := v.dead.Deregister(); err != nil {
		t.Fatal(err)
	}
	if v.ln, err = v.dev.Listen(v.addr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		v.ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			r, err := v.ln.Accept(ctx)
			if err != nil {
				return
			}
			cq, err := v.dev.CreateCQ(2048, verbs.CQOptions{})
			if err != nil {
				panic(err)
			}
			qp, err := v.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SignalAll: true, SendDepth: 64, RecvDepth: 1024})
			if err != nil {
				panic(err)
			}
			if err := r.Accept(qp, nil); err != nil {
				qp.Close()
				continue
			}
			v.accepted <- accepted{qp: qp, cq: cq, private: string(r.PrivateData())}
		}
	}()
	v.honest = newHonest(t, v)
	return v
}

// next returns the next connection accepted, which must carry private.
func (v *victim) next(t testing.TB, private string) accepted {
	t.Helper()
	select {
	case a := <-v.accepted:
		if a.private != private {
			t.Fatalf("accepted a connection with private data %q, want %q", a.private, private)
		}
		t.Cleanup(func() { a.qp.Close() })
		return a
	case <-time.After(hostileTimeout):
		t.Fatalf("no connection with private data %q accepted", private)
	}
	return accepted{}
}

// after checks, after an attack, that no memory outside what the test
// expects was written, that the victim serves its honest connection, that
// nothing was accepted meanwhile, and that the victim holds no connection
// but the honest one once the attacker's is over.
func (v *victim) after(t testing.TB) {
	t.Helper()
	for _, g := range v.regions {
		g.check(t)
	}
	v.honest.check(t)
	select {
	case a := <-v.accepted:
		a.qp.Close()
		t.Errorf("a connection with private data %q was accepted", a.private)
	default:
	}
}

// settled waits until the victim holds only its honest connection.
func (v *victim) settled(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(hostileTimeout)
	for len(v.p.Stats()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the victim still holds %d connections", len(v.p.Stats()))
		}
		time.Sleep(time.Millisecond)
	}
}

// honest is a connection to the victim from another provider that
// plays by the rules.
type honest struct {
	v      *victim
	qp, vq *verbs.QP // ours, and the victim's end
	cq, vc *verbs.CQ
	buf    []byte // send buffer and receive buffer
	mr     *verbs.MR
	rbuf   *guarded // the victim's receive buffer for it
	target *guarded // the victim's region it writes into
	round  int
}

func newHonest(t testing.TB, v *victim) *honest {
	t.Helper()
	h := &honest{v: v, buf: make([]byte, 256)}
	dev, err := verbs.Open(mustNew())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	h.cq, _ = dev.CreateCQ(16, verbs.CQOptions{})
	if h.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: h.cq, RecvCQ: h.cq, SignalAll: true}); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = pd.RegisterMR(h.buf, mreg.LocalWrite); err != nil {
		t.Fatal(err)
	}
	h.rbuf = newGuarded(t, v.pd, "honest receive buffer", 64, mreg.LocalWrite)
	h.target = newGuarded(t, v.pd, "honest target", 64, mreg.LocalWrite|mreg.RemoteWrite)
	v.regions = append(v.regions, h.rbuf, h.target)
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	if _, err := h.qp.Connect(ctx, v.addr, []byte("honest")); err != nil {
		t.Fatal(err)
	}
	a := v.next(t, "honest")
	h.vq, h.vc = a.qp, a.cq
	h.check(t)
	return h
}

// check runs one round: a SEND each way and an RDMA WRITE into the
// victim's memory, checked byte for byte.
func (h *honest) check(t testing.TB) {
	t.Helper()
	h.round++
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	wcs := make([]verbs.WC, 2)
	wait := func(cq *verbs.CQ, n int, what string) {
		t.Helper()
		if _, err := cq.Wait(ctx, wcs[:n], n); err != nil {
			t.Fatalf("honest connection, round %d, %s: %v (victim's end: %v)", h.round, what, err, h.vq.Err())
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.StatusSuccess {
				t.Fatalf("honest connection, round %d, %s: %v (victim's end: %v)", h.round, what, wc.Status, h.vq.Err())
			}
		}
	}
	msg := fmt.Appendf(nil, "honest round %04d", h.round)
	if err := h.vq.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{h.rbuf.mr.SGE(0, 64)}}); err != nil {
		t.Fatalf("honest connection, round %d: the victim's PostRecv: %v", h.round, err)
	}
	if err := h.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{h.mr.SGE(128, 64)}}); err != nil {
		t.Fatal(err)
	}
	copy(h.buf, msg)
	if err := h.qp.PostSend(verbs.SendWR{Opcode: verbs.OpWrite, SGL: []verbs.SGE{h.mr.SGE(0, len(msg))},
		RKey: h.target.mr.RKey(), RemoteAddr: h.target.mr.Addr() + 8}); err != nil {
		t.Fatal(err)
	}
	if err := h.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{h.mr.SGE(0, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	wait(h.cq, 2, "WRITE and SEND")
	wait(h.vc, 1, "the victim's RECV")
	h.rbuf.expect(0, msg)
	h.target.expect(8, msg)
	if err := h.vq.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{h.rbuf.mr.SGE(0, len(msg))}}); err != nil {
		t.Fatalf("honest connection, round %d: the victim's PostSend: %v", h.round, err)
	}
	wait(h.vc, 1, "the victim's SEND")
	wait(h.cq, 1, "the RECV of the victim's SEND")
	if !bytes.Equal(h.buf[128:128+len(msg)], msg) {
		t.Fatalf("honest connection, round %d: received %q, want %q", h.round, h.buf[128:128+len(msg)], msg)
	}
	h.rbuf.check(t)
	h.target.check(t)
}

// rawProbe is the probe word of raw peers that let the victim use
// cross-memory attach (into this process).
var rawProbe = [1]uint64{0x5eed_f00d_cafe_0001}

// rawOpts configures a raw peer's handshake.
type rawOpts struct {
	probe  bool // give a probe word the victim can read: it uses cross-memory attach
	rnr    verbs.RNRPolicy
	tamper func(h *rawHandshake) // changes the request before it goes
}

// rawHandshake is the request a raw peer sends, and its mapping.
type rawHandshake struct {
	msg []byte // the request
	fds []int  // the descriptors sent with it: the mapping's memfd
	m   []byte // the mapping
	lo  layout
}

// raw is a hand-driven peer: a link of side 0 that is never started, whose
// rings the test writes and reads itself.
type raw struct {
	l    *link
	conn *net.UnixConn
	id   uint32 // next request id
}

// dialRaw runs the dialer's half of the rendezvous by hand. It returns the
// raw peer once accepted, or the error that ended the handshake (io.EOF
// when the listener hung up).
func dialRaw(t testing.TB, addr string, o rawOpts) (*raw, error) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: strings.TrimPrefix(addr, Scheme), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(hostileTimeout))
	b := make([]byte, maxHandshake)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseHello(b[:n]); err != nil {
		t.Fatal(err)
	}
	h := &rawHandshake{lo: newLayout(16<<10, 16<<10)}
	fd, m, err := createMapping(h.lo.total)
	if err != nil {
		t.Fatal(err)
	}
	h.m, h.fds = m, []int{fd}
	*(*header)(unsafe.Pointer(&m[0])) = header{magic: headerMagic, version: protoVersion,
		reqSize: h.lo.reqSize, respSize: h.lo.respSize, nonce: uint64(time.Now().UnixNano())}
	rnr := o.rnr
	if rnr == 0 {
		rnr = verbs.RNRFail
	}
	req := requestMsg{rnr: rnr, reqSize: h.lo.reqSize, respSize: h.lo.respSize, private: []byte("raw")}
	if o.probe {
		req.cma = true
		req.probeAddr, req.probeVal = uint64(uintptr(unsafe.Pointer(&rawProbe[0]))), rawProbe[0]
	}
	h.msg = b[:putRequest(b, req)]
	if o.tamper != nil {
		o.tamper(h)
	}
	var oob []byte
	if len(h.fds) > 0 {
		oob = unix.UnixRights(h.fds...)
	}
	_, _, err = c.WriteMsgUnix(h.msg, oob, nil)
	for _, fd := range h.fds {
		unix.Close(fd)
	}
	if err == nil {
		n, err = c.Read(b)
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	var rep replyMsg
	if err == nil {
		rep, err = parseReply(b[:n])
	}
	if err == nil && rep.kind != replyAccept {
		err = errors.New("rejected")
	}
	if err != nil {
		c.Close()
		unix.Munmap(m)
		return nil, err
	}
	c.SetDeadline(time.Time{})
	r := &raw{l: newLink(mustNew(), 0, m, h.lo, c), conn: c}
	r.l.cma = o.probe && rep.cma
	t.Cleanup(r.close)
	return r, nil
}

// close hangs up and unmaps the mapping.
func (r *raw) close() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
		r.l.release()
	}
}

// put writes records into the raw peer's request ring (or, resp, its
// response ring) as they are, and wakes the victim.
func (r *raw) put(t testing.TB, resp bool, recs ...[]byte) {
	t.Helper()
	p := &r.l.tx.reqOut
	if resp {
		p = &r.l.tx.respOut
	}
	for _, rec := range recs {
		b := p.reserve(len(rec))
		if b == nil {
			t.Fatalf("no room for a record of %d bytes", len(rec))
		}
		copy(b, rec)
		p.commit(len(rec))
	}
	r.l.peer.ringAlways()
}

// tryPut writes a record into the request ring if there is room.
func (r *raw) tryPut(rec []byte) bool {
	b := r.l.tx.reqOut.reserve(len(rec))
	if b == nil {
		return false
	}
	copy(b, rec)
	r.l.tx.reqOut.commit(len(rec))
	return true
}

// nextID returns the id of the next request.
func (r *raw) nextID() uint32 {
	r.id++
	return r.id - 1
}

// reqRec builds a request record.
func reqRec(op verbs.Opcode, mode byte, nseg int, id, rkey uint32, raddr, n uint64, body []byte) []byte {
	b := make([]byte, reqHdr+len(body))
	putHdr(b, recReq)
	b[5], b[6], b[7] = byte(op), mode, byte(nseg)
	binary.LittleEndian.PutUint32(b[8:], id)
	binary.LittleEndian.PutUint32(b[12:], 0x1111)
	binary.LittleEndian.PutUint32(b[16:], rkey)
	binary.LittleEndian.PutUint64(b[24:], raddr)
	binary.LittleEndian.PutUint64(b[32:], n)
	copy(b[reqHdr:], body)
	return b
}

// rec builds a record of type typ whose header says length n (0: its
// real length), with body after the header.
func rec(typ byte, n int, body []byte) []byte {
	b := make([]byte, recHdr+len(body))
	putHdr(b, typ)
	if n != 0 {
		binary.LittleEndian.PutUint32(b, uint32(n))
	}
	copy(b[recHdr:], body)
	return b
}

// respRec builds a response record (recAck, recDone, recRData, recTerm).
func respRec(typ byte, id, code uint32, data []byte) []byte {
	b := make([]byte, respHdr+len(data))
	putHdr(b, typ)
	binary.LittleEndian.PutUint32(b[8:], id)
	binary.LittleEndian.PutUint32(b[12:], code)
	copy(b[respHdr:], data)
	return b
}

// iovBody encodes iovecs of a modeIov request.
func iovBody(segs ...[2]uint64) []byte {
	b := make([]byte, 16*len(segs))
	for i, s := range segs {
		binary.LittleEndian.PutUint64(b[16*i:], s[0])
		binary.LittleEndian.PutUint64(b[16*i+8:], s[1])
	}
	return b
}

// response is a record the victim wrote into its response ring.
type response struct {
	typ      byte
	id, code uint32
	data     []byte
}

func (x response) String() string {
	names := map[byte]string{recAck: "ACK", recDone: "DONE", recRData: "RDATA", recTerm: "TERM"}
	return fmt.Sprintf("%s(id %d, code %d, %d bytes %.60q)", names[x.typ], x.id, x.code, len(x.data), x.data)
}

// responses reads what the victim wrote back until its TERM, or until
// want more records came (want > 0).
func (r *raw) responses(t testing.TB, want int) []response {
	t.Helper()
	var out []response
	c := &r.l.rx.respIn
	deadline := time.Now().Add(hostileTimeout)
	for {
		b, err := c.peek()
		if err != nil {
			t.Fatalf("the victim's response ring: %v", err)
		}
		if b == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the victim's responses so far: %v; no TERM came", out)
			}
			time.Sleep(100 * time.Microsecond)
			continue
		}
		x := response{typ: b[4], id: binary.LittleEndian.Uint32(b[8:]), code: binary.LittleEndian.Uint32(b[12:]),
			data: bytes.Clone(b[respHdr:])}
		c.advance(len(b))
		c.publish()
		r.l.peer.ringAlways() // the victim may wait for room
		out = append(out, x)
		if x.typ == recTerm || want > 0 && len(out) == want {
			return out
		}
	}
}

// terminated waits until the victim's end of a connection failed and
// returns its error.
func terminated(t testing.TB, a accepted) error {
	t.Helper()
	select {
	case <-a.qp.Done():
		return a.qp.Err()
	case <-time.After(hostileTimeout):
		t.Fatalf("the victim's queue pair is still %v", a.qp.State())
	}
	return nil
}

// attack connects a raw peer to the victim and returns it with the
// victim's end.
func (v *victim) attack(t testing.TB, o rawOpts) (*raw, accepted) {
	t.Helper()
	r, err := dialRaw(t, v.addr, o)
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	return r, v.next(t, "raw")
}

// TestHostileHandshake sends the victim's listener requests that break
// the rendezvous: each is refused (the listener hangs up without a
// reply, nothing reaches Accept), no memory outside the registered
// regions is written, and the honest connection keeps working.
func TestHostileHandshake(t *testing.T) {
	v := newVictim(t)
	memfd := func(t *testing.T, size uint64, seals int) int {
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	replaceFD := func(h *rawHandshake, fd int) {
		unix.Close(h.fds[0])
		h.fds[0] = fd
	}
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, h *rawHandshake)
	}{
		{"BadMagic", func(t *testing.T, h *rawHandshake) { h.msg[0] ^= 1 }},
		{"BadVersion", func(t *testing.T, h *rawHandshake) { binary.LittleEndian.PutUint16(h.msg[4:], protoVersion+1) }},
		{"Truncated", func(t *testing.T, h *rawHandshake) { h.msg = h.msg[:requestLen-1] }},
		{"TrailingBytes", func(t *testing.T, h *rawHandshake) { h.msg = append(h.msg, 0) }},
		{"PrivateLengthLies", func(t *testing.T, h *rawHandshake) { binary.LittleEndian.PutUint16(h.msg[40:], 2) }},
		{"PrivateTooLong", func(t *testing.T, h *rawHandshake) {
			binary.LittleEndian.PutUint16(h.msg[40:], verbs.MaxPrivateData+1)
			h.msg = append(h.msg[:requestLen], make([]byte, verbs.MaxPrivateData+1)...)
		}},
		{"RNRZero", func(t *testing.T, h *rawHandshake) { h.msg[6] = 0 }},
		{"RNRUnknown", func(t *testing.T, h *rawHandshake) { h.msg[6] = 3 }},
		{"RingNotPowerOfTwo", func(t *testing.T, h *rawHandshake) { binary.LittleEndian.PutUint64(h.msg[24:], 24<<10) }},
		{"RingTooSmall", func(t *testing.T, h *rawHandshake) { binary.LittleEndian.PutUint64(h.msg[32:], 8<<10) }},
		{"RingTooLarge", func(t *testing.T, h *rawHandshake) { binary.LittleEndian.PutUint64(h.msg[24:], 1<<30) }},
		{"RingSizesDisagreeWithMapping", func(t *testing.T, h *rawHandshake) {
			// The mapping is that of 16 KiB rings, the request says 32.
			binary.LittleEndian.PutUint64(h.msg[24:], 32<<10)
		}},
		{"NoDescriptor", func(t *testing.T, h *rawHandshake) { unix.Close(h.fds[0]); h.fds = nil }},
		{"TwoDescriptors", func(t *testing.T, h *rawHandshake) {
			h.fds = append(h.fds, memfd(t, h.lo.total, wantSeals))
		}},
		{"Unsealed", func(t *testing.T, h *rawHandshake) { replaceFD(h, memfd(t, h.lo.total, 0)) }},
		{"GrowNotSealed", func(t *testing.T, h *rawHandshake) {
			replaceFD(h, memfd(t, h.lo.total, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL))
		}},
		{"WriteSealed", func(t *testing.T, h *rawHandshake) {
			replaceFD(h, memfd(t, h.lo.total, wantSeals&^unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL))
		}},
		{"MappingTooSmall", func(t *testing.T, h *rawHandshake) { replaceFD(h, memfd(t, h.lo.total-pageSize, wantSeals)) }},
		{"MappingTooLarge", func(t *testing.T, h *rawHandshake) { replaceFD(h, memfd(t, h.lo.total+pageSize, wantSeals)) }},
		{"NotAMemfd", func(t *testing.T, h *rawHandshake) {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[1])
			replaceFD(h, p[0])
		}},
		{"HeaderMagic", func(t *testing.T, h *rawHandshake) { (*header)(unsafe.Pointer(&h.m[0])).magic++ }},
		{"HeaderVersion", func(t *testing.T, h *rawHandshake) { (*header)(unsafe.Pointer(&h.m[0])).version++ }},
		{"HeaderRingSize", func(t *testing.T, h *rawHandshake) { (*header)(unsafe.Pointer(&h.m[0])).respSize = 32 << 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fds := openFDs(t)
			_, err := dialRaw(t, v.addr, rawOpts{tamper: func(h *rawHandshake) { tc.tamper(t, h) }})
			if !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
				t.Fatalf("the listener answered the request with %v, want it to hang up", err)
			}
			v.after(t)
			fdsBack(t, fds)
		})
	}
	t.Run("Silent", func(t *testing.T) {
		// Peers that connect and say nothing hold a handshake each
		// (for handshakeTimeout), not the listener.
		for range 20 {
			c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: strings.TrimPrefix(v.addr, Scheme), Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		v.after(t)
		r, _ := v.attack(t, rawOpts{})
		r.close()
	})
	t.Run("SilentFlood", func(t *testing.T) {
		// Beyond maxHandshakes silent peers at once, the listener hangs
		// up on the next one at once instead of starting a goroutine.
		var conns []*net.UnixConn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		dial := func() *net.UnixConn {
			c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: strings.TrimPrefix(v.addr, Scheme), Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			return c
		}
		for range maxHandshakes + 8 {
			dial()
		}
		// A held connection reads the listener's hello; one hung up on
		// reads EOF.
		hungUp := 0
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := c.Read(make([]byte, 64)); errors.Is(err, io.EOF) {
				hungUp++
			}
		}
		if hungUp < 8 {
			t.Fatalf("%d of %d silent connections hung up on, want at least 8", hungUp, len(conns))
		}
	})
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// fdsBack checks that this process's open descriptors come back to at
// most before within hostileTimeout: the victim closes a hung-up
// handshake's descriptors in its own goroutine, a moment after the peer
// sees the hang-up (a check made at once counted one more, once under
// load).
func fdsBack(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(hostileTimeout)
	for {
		n := openFDs(t)
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d descriptors open, %d before", n, before)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// recAttack is one hostile exchange on an accepted connection.
type recAttack struct {
	name string
	o    rawOpts
	// prep runs on the victim's end before the attack.
	prep func(t *testing.T, v *victim, a accepted)
	// run writes the records; it may also close the raw peer.
	run func(t *testing.T, v *victim, r *raw)
	// wantErr is what the victim's queue pair's error wraps.
	wantErr error
	// wantDone is the outcome code the victim reports before its TERM
	// (0: none); noTerm: the raw peer is gone, read nothing back.
	wantDone uint32
	noTerm   bool
}

// TestHostileRecords writes records that break the rules of the rings
// into a raw peer's rings: forged keys, addresses out of bounds, lengths
// that lie, truncated and oversized records, bad counters, iovecs and
// modes, outcomes of messages never sent. For each, the victim's end of
// the connection fails (with the outcome code the violation maps to, then
// a TERM), no byte outside the registered regions (and, for refused
// operations, none inside) is written, no goroutine panics, the victim
// releases the connection, and the honest connection keeps working.
func TestHostileRecords(t *testing.T) {
	v := newVictim(t)
	w := v.w.mr
	ro := v.ro.mr
	eight := []byte("hostile!")
	// same returns the region's own bytes at off: a payload that changes
	// nothing if placed, for messages cut short after some bytes.
	same := func(g *guarded, off, n int) []byte { return bytes.Clone(g.region()[off : off+n]) }
	write := func(rkey mreg.Key, raddr uint64, n uint64, body []byte) func(t *testing.T, v *victim, r *raw) {
		return func(t *testing.T, v *victim, r *raw) {
			r.put(t, false, reqRec(verbs.OpWrite, modeInline, 0, r.nextID(), uint32(rkey), raddr, n, body))
		}
	}
	put := func(resp bool, recs ...func(r *raw) []byte) func(t *testing.T, v *victim, r *raw) {
		return func(t *testing.T, v *victim, r *raw) {
			for _, f := range recs {
				r.put(t, resp, f(r))
			}
		}
	}
	req := func(op verbs.Opcode, mode byte, nseg int, rkey mreg.Key, raddr, n uint64, body []byte) func(r *raw) []byte {
		return func(r *raw) []byte { return reqRec(op, mode, nseg, r.nextID(), uint32(rkey), raddr, n, body) }
	}
	lit := func(b []byte) func(r *raw) []byte { return func(*raw) []byte { return b } }
	zeroLen := rec(recReq, 0, eight)
	binary.LittleEndian.PutUint32(zeroLen, 0)
	// setTail publishes a tail counter the ring's rules forbid.
	setTail := func(tail uint64) func(t *testing.T, v *victim, r *raw) {
		return func(t *testing.T, v *victim, r *raw) {
			r.l.tx.reqOut.r.ctl.tail.Store(tail)
			r.l.peer.ringAlways()
		}
	}
	probe := rawOpts{probe: true}
	postRecv := func(n int) func(t *testing.T, v *victim, a accepted) {
		return func(t *testing.T, v *victim, a accepted) {
			if err := a.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{v.rbuf.mr.SGE(0, n)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const unmapped = 0x1000 // no mapping at the first pages of a process

	attacks := []recAttack{
		// Keys and addresses.
		{name: "ForgedKey", run: write(w.RKey()^(mreg.MaxRegions+1), w.Addr(), 8, eight),
			wantErr: mreg.ErrInvalidKey, wantDone: codeInvalidKey},
		{name: "LocalKeyAsRemote", run: write(w.LKey(), w.Addr(), 8, eight),
			wantErr: mreg.ErrAccess, wantDone: codeAccess},
		{name: "ZeroKey", run: write(0, w.Addr(), 8, eight), wantErr: mreg.ErrInvalidKey, wantDone: codeInvalidKey},
		{name: "DeregisteredKey", run: write(v.dead.RKey(), v.dead.Addr(), 8, eight),
			wantErr: mreg.ErrInvalidKey, wantDone: codeInvalidKey},
		{name: "PastEnd", run: write(w.RKey(), w.Addr()+4096-4, 8, eight), wantErr: mreg.ErrBounds, wantDone: codeBounds},
		{name: "BeforeStart", run: write(w.RKey(), w.Addr()-8, 8, eight), wantErr: mreg.ErrBounds, wantDone: codeBounds},
		{name: "AddressWraps", run: write(w.RKey(), 1<<64-4, 8, eight), wantErr: mreg.ErrBounds, wantDone: codeBounds},
		{name: "WriteWithoutRemoteWrite", run: write(ro.RKey(), ro.Addr(), 8, eight), wantErr: mreg.ErrAccess, wantDone: codeAccess},
		{name: "WriteLocalOnly", run: write(v.loc.mr.RKey(), v.loc.mr.Addr(), 8, eight),
			wantErr: mreg.ErrAccess, wantDone: codeAccess},
		{name: "ReadWithoutRemoteRead", run: put(false, req(verbs.OpRead, modeRData, 0, v.loc.mr.RKey(), v.loc.mr.Addr(), 8, nil)),
			wantErr: mreg.ErrAccess, wantDone: codeAccess},
		{name: "ReadPastEnd", run: put(false, req(verbs.OpRead, modeRData, 0, ro.RKey(), ro.Addr()+4000, 200, nil)),
			wantErr: mreg.ErrBounds, wantDone: codeBounds},
		{name: "UnknownOpcode", run: put(false, req(200, modeInline, 0, w.RKey(), w.Addr(), 8, eight)),
			wantErr: verbs.ErrInvalid, wantDone: codeInvalid},

		// Lengths.
		{name: "LengthAboveMaxMessage", run: write(w.RKey(), w.Addr(), verbs.MaxMessage+1, eight), wantErr: errCorrupt},
		{name: "LengthBelowInlineBytes", run: write(w.RKey(), w.Addr(), 4, eight), wantErr: errCorrupt},
		{name: "FragmentMissing", run: put(false,
			req(verbs.OpWrite, modeInline, 0, w.RKey(), w.Addr(), 16, same(v.w, 0, 8)), lit(respRec(recAck, 0, 0, nil))),
			wantErr: errCorrupt, wantDone: codeOther},
		{name: "FragmentEmpty", run: put(false,
			req(verbs.OpWrite, modeInline, 0, w.RKey(), w.Addr(), 16, same(v.w, 0, 8)), lit(rec(recFrag, 0, nil))),
			wantErr: errCorrupt, wantDone: codeOther},
		{name: "FragmentTooLong", run: put(false,
			req(verbs.OpWrite, modeInline, 0, w.RKey(), w.Addr(), 16, same(v.w, 0, 8)), lit(rec(recFrag, 0, same(v.w, 8, 16)))),
			wantErr: errCorrupt, wantDone: codeOther},
		{name: "FragmentAlone", run: put(false, lit(rec(recFrag, 0, eight))), wantErr: errCorrupt},
		{name: "PeerGoneMidMessage", run: func(t *testing.T, v *victim, r *raw) {
			r.put(t, false, reqRec(verbs.OpWrite, modeInline, 0, r.nextID(), uint32(w.RKey()), w.Addr(), 16, same(v.w, 0, 8)))
			r.close()
		}, wantErr: io.ErrUnexpectedEOF, noTerm: true},
		{name: "SendLongerThanRecv", prep: postRecv(64), run: put(false, req(verbs.OpSend, modeInline, 0, 0, 0, 100, make([]byte, 100))),
			wantErr: verbs.ErrTerminated, wantDone: codeTooLong},
		{name: "SendWithoutRecv", run: func(t *testing.T, v *victim, r *raw) {
			// The victim refuses it (the raw peer's policy is RNRFail)
			// and takes no more requests; ending the connection is the
			// initiator's business, as it is for its queue pair.
			r.put(t, false, reqRec(verbs.OpSend, modeInline, 0, r.nextID(), 0, 0, 8, eight))
			if got := r.responses(t, 1); got[0].typ != recDone || got[0].code != codeNoRecv {
				t.Errorf("the victim answered %v, want the outcome code %d", got, codeNoRecv)
			}
			r.put(t, false, reqRec(verbs.OpWrite, modeInline, 0, r.nextID(), uint32(w.RKey()), w.Addr(), 8, eight))
			time.Sleep(10 * time.Millisecond)
			if v.w.region()[0] != v.w.want[verbstest.Guard] {
				t.Error("the victim took a request after refusing a SEND")
			}
			r.put(t, true, respRec(recTerm, termError, 0, []byte("refused")))
		}, wantErr: verbs.ErrTerminated},

		// Framing.
		{name: "ResponseTypeInRequestRing", run: put(false, lit(respRec(recAck, 0, 0, nil))), wantErr: errCorrupt},
		{name: "UnknownType", run: put(false, lit(rec(99, 0, eight))), wantErr: errCorrupt},
		{name: "RequestShorterThanHeader", run: put(false, lit(rec(recReq, 0, eight))), wantErr: errCorrupt},
		{name: "LengthBelowRecordHeader", run: put(false, lit(rec(recReq, 4, eight))), wantErr: errCorrupt},
		{name: "LengthZero", run: put(false, lit(zeroLen)), wantErr: errCorrupt},
		{name: "LengthPastRingEnd", run: put(false, lit(rec(recReq, 32<<10, eight))), wantErr: errCorrupt},
		{name: "LengthPastTail", run: put(false, lit(rec(recReq, 4096, eight))), wantErr: errCorrupt},
		{name: "TailAheadByMoreThanRing", run: setTail(16<<10 + 8), wantErr: errCorrupt},
		{name: "TailUnaligned", run: setTail(12), wantErr: errCorrupt},
		{name: "TailFarAhead", run: setTail(1 << 63), wantErr: errCorrupt},

		// Payload modes and iovecs.
		{name: "IovecsWithoutCMA", run: put(false,
			req(verbs.OpWrite, modeIov, 1, w.RKey(), w.Addr(), 8, iovBody([2]uint64{uint64(uintptrOf(eight)), 8}))),
			wantErr: errCorrupt},
		{name: "IovecCountMismatch", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, 2, w.RKey(), w.Addr(), 8, iovBody([2]uint64{uint64(uintptrOf(eight)), 8}))),
			wantErr: errCorrupt},
		{name: "IovecsAboveMaxSGE", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, verbs.MaxSGE+1, w.RKey(), w.Addr(), 0, make([]byte, 16*(verbs.MaxSGE+1)))),
			wantErr: errCorrupt},
		{name: "IovecSumMismatch", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, 1, w.RKey(), w.Addr(), 16, iovBody([2]uint64{uint64(uintptrOf(eight)), 8}))),
			wantErr: errCorrupt},
		{name: "IovecWraps", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, 1, w.RKey(), w.Addr(), 8, iovBody([2]uint64{1<<64 - 4, 8}))),
			wantErr: errCorrupt},
		{name: "IovecAboveMaxMessage", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, 2, w.RKey(), w.Addr(), 8, iovBody([2]uint64{unmapped, verbs.MaxMessage + 1}, [2]uint64{unmapped, 1<<64 - verbs.MaxMessage - 1 + 8}))),
			wantErr: errCorrupt},
		{name: "IovecUnmappedWrite", o: probe, run: put(false,
			req(verbs.OpWrite, modeIov, 1, w.RKey(), w.Addr(), 8, iovBody([2]uint64{unmapped, 8}))),
			wantErr: unix.EFAULT, wantDone: codeOther},
		{name: "IovecUnmappedRead", o: probe, run: put(false,
			req(verbs.OpRead, modeIov, 1, ro.RKey(), ro.Addr(), 8, iovBody([2]uint64{unmapped, 8}))),
			wantErr: unix.EFAULT, wantDone: codeOther},
		{name: "ReadDataWithBody", run: put(false, req(verbs.OpRead, modeRData, 0, ro.RKey(), ro.Addr(), 8, eight)),
			wantErr: errCorrupt},
		{name: "ReadDataForWrite", run: put(false, req(verbs.OpWrite, modeRData, 0, w.RKey(), w.Addr(), 8, nil)),
			wantErr: errCorrupt},
		{name: "InlineRead", run: put(false, req(verbs.OpRead, modeInline, 0, ro.RKey(), ro.Addr(), 8, nil)),
			wantErr: errCorrupt},
		{name: "UnknownMode", run: put(false, req(verbs.OpWrite, 9, 0, w.RKey(), w.Addr(), 8, eight)), wantErr: errCorrupt},

		// The response ring, with nothing of the victim's in flight.
		{name: "AckOfNothing", run: put(true, lit(respRec(recAck, 5, 0, nil))), wantErr: errCorrupt},
		{name: "DoneOfNothing", run: put(true, lit(respRec(recDone, 0, codeBounds, nil))), wantErr: errCorrupt},
		{name: "ReadDataOfNothing", run: put(true, lit(respRec(recRData, 0, 0, eight))), wantErr: errCorrupt},
		{name: "ResponseShorterThanHeader", run: put(true, lit(rec(recAck, 0, nil))), wantErr: errCorrupt},
		{name: "RequestTypeInResponseRing", run: put(true, lit(reqRec(verbs.OpWrite, modeInline, 0, 0, uint32(w.RKey()), w.Addr(), 8, eight))),
			wantErr: errCorrupt},
		{name: "TermWithLongText", run: put(true, lit(respRec(recTerm, termError, 0, bytes.Repeat([]byte("x"), 4000)))),
			wantErr: verbs.ErrTerminated, noTerm: true},
	}
	for _, c := range attacks {
		t.Run(c.name, func(t *testing.T) {
			r, a := v.attack(t, c.o)
			if c.o.probe && !r.l.cma {
				t.Fatal("the victim does not use cross-memory attach with the raw peer")
			}
			if c.prep != nil {
				c.prep(t, v, a)
			}
			c.run(t, v, r)
			err := terminated(t, a)
			if !errors.Is(err, c.wantErr) {
				t.Errorf("the victim's queue pair failed with %v, want %v", err, c.wantErr)
			}
			if !c.noTerm {
				got := r.responses(t, 0)
				want := []byte{recTerm}
				if c.wantDone != 0 {
					want = []byte{recDone, recTerm}
				}
				var types []byte
				for _, x := range got {
					if x.typ != recAck {
						types = append(types, x.typ)
					}
				}
				last := got[len(got)-1]
				if !bytes.Equal(types, want) || c.wantDone != 0 && got[len(got)-2].code != c.wantDone || last.id != termError {
					t.Errorf("the victim answered %v; want %v (outcome code %d), then a TERM of an error", got, want, c.wantDone)
				}
			}
			r.close()
			v.settled(t)
			v.after(t)
		})
	}
}

// linkOf returns the victim's link serving its queue pair qp.
func (v *victim) linkOf(t testing.TB, qp *verbs.QP) *link {
	t.Helper()
	v.p.mu.Lock()
	defer v.p.mu.Unlock()
	for l := range v.p.links {
		if l.ep.QPNum() == qp.Num() {
			return l
		}
	}
	t.Fatalf("no link serves queue pair %d", qp.Num())
	return nil
}

// pending returns the records a link holds for want of room in its
// response ring, and the bytes of READ data among them.
func (l *link) pending() (records, bytes int) {
	l.tx.Lock()
	defer l.tx.Unlock()
	for _, it := range l.tx.pendResp.q[l.tx.pendResp.head:] {
		records++
		bytes += len(it.data)
	}
	return records, bytes
}

// TestHostileFloods floods the victim with valid requests while never
// reading its response ring: what the victim holds for the raw peer stays
// bounded (one acknowledgement; at most one READ's data), the request ring
// stops taking more, and once the raw peer reads again every request is
// answered. A flood of SENDs with no RECV posted under RNRWait is held,
// bounded by the ring, until RECVs come.
func TestHostileFloods(t *testing.T) {
	v := newVictim(t)
	w, ro := v.w.mr, v.ro.mr
	flood := func(t *testing.T, r *raw, d time.Duration, mk func(id uint32) []byte) (sent int) {
		t.Helper()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			for r.tryPut(mk(r.id)) {
				r.id++
				sent++
			}
			r.l.peer.ringAlways()
			time.Sleep(100 * time.Microsecond)
		}
		return sent
	}
	// drain reads the victim's responses until the acknowledgement of
	// id, and returns the READ data bytes among them.
	drain := func(t *testing.T, r *raw, id uint32) (data int) {
		t.Helper()
		for {
			for _, x := range r.responses(t, 1) {
				switch x.typ {
				case recRData:
					data += len(x.data)
				case recAck:
					if x.id == id {
						return data
					}
				default:
					t.Fatalf("the victim answered %v", x)
				}
			}
		}
	}

	t.Run("Writes", func(t *testing.T) {
		r, a := v.attack(t, rawOpts{})
		l := v.linkOf(t, a.qp)
		// Until the victim's response ring is full of acknowledgements,
		// then as long again.
		mk := func(id uint32) []byte {
			return reqRec(verbs.OpWrite, modeInline, 0, id, uint32(w.RKey()), w.Addr()+8*uint64(id%500), 8, []byte("floodfld"))
		}
		start, sent := time.Now(), 0
		resp := r.l.rx.respIn.r
		for resp.ctl.tail.Load()+2*respHdr <= resp.size {
			if time.Since(start) > hostileTimeout {
				t.Fatal("the victim's response ring does not fill up")
			}
			sent += flood(t, r, time.Millisecond, mk)
		}
		sent += flood(t, r, time.Since(start), mk)
		recs, _ := l.pending()
		t.Logf("%d WRITEs sent, %d records pending at the victim", sent, recs)
		if recs > 2 {
			t.Errorf("the victim holds %d records for a peer that does not read them", recs)
		}
		for i := range 500 {
			v.w.expect(8*i, []byte("floodfld"))
		}
		drain(t, r, r.id-1)
		if a.qp.State() != verbs.StateReadyToSend {
			t.Errorf("the victim's end is %v: %v", a.qp.State(), a.qp.Err())
		}
		r.close()
		v.settled(t)
		v.after(t)
	})

	t.Run("Reads", func(t *testing.T) {
		r, a := v.attack(t, rawOpts{})
		l := v.linkOf(t, a.qp)
		const n = 4096
		sent := flood(t, r, 200*time.Millisecond, func(id uint32) []byte {
			return reqRec(verbs.OpRead, modeRData, 0, id, uint32(ro.RKey()), ro.Addr(), n, nil)
		})
		recs, held := l.pending()
		t.Logf("%d READs of %d bytes sent, %d records and %d bytes pending at the victim", sent, n, recs, held)
		if held > 2*n {
			t.Errorf("the victim holds %d bytes of READ data for a peer that does not read them", held)
		}
		if got := drain(t, r, r.id-1); got != sent*n {
			t.Errorf("%d bytes of READ data came back, want %d", got, sent*n)
		}
		r.close()
		v.settled(t)
		v.after(t)
	})

	t.Run("WritesAfterTerm", func(t *testing.T) {
		// The raw peer stops the victim taking requests (READs whose
		// data fill the response ring it does not read), fills its
		// request ring with WRITEs, sends a TERM of a plain disconnect
		// (after which the victim delivers what the ring holds,
		// whatever waits for room), and then keeps the ring full of
		// WRITEs behind what the victim placed (the victim does not
		// publish its progress meanwhile): the victim delivers at most
		// a ring's worth, and ends the connection.
		r, a := v.attack(t, rawOpts{})
		l := v.linkOf(t, a.qp)
		p := &r.l.tx.reqOut
		const recLen = 64 // every record, READs with a pad after them
		slots := uint64(p.r.size / recLen)
		read := append(reqRec(verbs.OpRead, modeRData, 0, 0, uint32(ro.RKey()), ro.Addr(), 4096, nil), rec(recPad, 0, make([]byte, recLen-reqHdr-recHdr))...)
		for deadline := time.Now().Add(hostileTimeout); !l.respPend.Load(); {
			if time.Now().After(deadline) {
				t.Fatal("the victim's response ring does not fill up")
			}
			if r.tryPut(read) {
				r.l.peer.ringAlways()
			}
			time.Sleep(100 * time.Microsecond)
		}
		// Each WRITE puts its count at the region's start.
		clear(v.w.region()[:8])
		placed := func() uint64 { return binary.LittleEndian.Uint64(v.w.region()[:8]) }
		sent, most := uint64(0), 8*slots
		write := func() []byte {
			b := make([]byte, 24)
			binary.LittleEndian.PutUint64(b, sent+1)
			return reqRec(verbs.OpWrite, modeInline, 0, uint32(sent), uint32(w.RKey()), w.Addr(), 24, b)
		}
		for r.tryPut(write()) {
			sent++
		}
		if placed() != 0 {
			t.Fatalf("the victim placed %d WRITEs while it held a response", placed())
		}
		r.put(t, true, respRec(recTerm, termDisconnect, 0, []byte("bye")))
		last, stalled := uint64(0), time.Now()
		for sent < most && time.Since(stalled) < 200*time.Millisecond {
			if k := placed(); k != last {
				last, stalled = k, time.Now()
			}
			// Records the victim has read may be written over: the
			// one it is at (last) must stay.
			for last > 0 && sent < min(last-1+slots, most) {
				copy(p.r.data[p.tail&(p.r.size-1):], write())
				p.tail += recLen
				sent++
			}
			p.r.ctl.tail.Store(p.tail)
			r.l.peer.ringAlways()
		}
		t.Logf("%d WRITEs written, %d placed after the TERM (the ring holds %d)", sent, placed(), slots)
		if placed() > slots {
			t.Errorf("the victim placed %d WRITEs after the TERM, more than the ring holds (%d)", placed(), slots)
		}
		if err := terminated(t, a); !errors.Is(err, verbs.ErrDisconnected) {
			t.Errorf("the victim's queue pair failed with %v, want %v", err, verbs.ErrDisconnected)
		}
		v.w.want = bytes.Clone(v.w.buf) // the WRITEs placed
		r.close()
		v.settled(t)
		v.after(t)
	})

	t.Run("SendsWithoutRecv", func(t *testing.T) {
		r, a := v.attack(t, rawOpts{rnr: verbs.RNRWait})
		l := v.linkOf(t, a.qp)
		sent := flood(t, r, 50*time.Millisecond, func(id uint32) []byte {
			return reqRec(verbs.OpSend, modeInline, 0, id, 0, 0, 8, []byte("sendsend"))
		})
		for deadline := time.Now().Add(hostileTimeout); l.me.sleeping.Load() != sleepNormal; {
			if time.Now().After(deadline) {
				t.Fatal("the victim's receiver does not sleep while it holds a SEND")
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("%d SENDs fit in the ring before the victim posted a RECV", sent)
		for range sent {
			if err := a.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{v.rbuf.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
		}
		v.rbuf.expect(0, []byte("sendsend"))
		drain(t, r, r.id-1)
		r.close()
		v.settled(t)
		v.after(t)
	})
}

// TestHostileResponses answers the victim's own messages with forged
// responses: an acknowledgement beyond what it sent, an outcome for a
// message that is not the oldest, READ data for another id or more of it
// than the READ asked for (into the last bytes of a region, so that one
// byte too many would land in the guard). The victim's end fails, its
// work requests complete with an error, and nothing outside the READ's
// destination is written.
func TestHostileResponses(t *testing.T) {
	v := newVictim(t)
	loc := v.loc.mr
	send := func(t *testing.T, a accepted, n int) {
		for i := range n {
			if err := a.qp.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpSend, SGL: []verbs.SGE{loc.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// read posts a READ of the raw peer's memory into the last 16 bytes of
	// the victim's local region: it goes through the ring (no
	// cross-memory attach, no arena), its data to come in records.
	read := func(t *testing.T, a accepted, _ int) {
		if err := a.qp.PostSend(verbs.SendWR{WRID: 9, Opcode: verbs.OpRead, SGL: []verbs.SGE{loc.SGE(4096-16, 16)},
			RKey: 0x1234, RemoteAddr: 0x10000}); err != nil {
			t.Fatal(err)
		}
	}
	zz := bytes.Repeat([]byte{'Z'}, 32)
	for _, c := range []struct {
		name  string
		post  func(t *testing.T, a accepted, n int)
		n     int      // messages the victim posts
		resp  [][]byte // the raw peer's answer
		place int      // bytes of zz the READ may place before it fails
		acked int      // work requests the answer acknowledges before it breaks the rules
	}{
		{"AckBeyondSent", send, 1, [][]byte{respRec(recAck, 1, 0, nil)}, 0, 0},
		{"AckFarAhead", send, 1, [][]byte{respRec(recAck, 1<<31, 0, nil)}, 0, 0},
		{"DoneNotOldest", send, 2, [][]byte{respRec(recDone, 1, codeBounds, nil)}, 0, 0},
		{"DoneOfAcked", send, 1, [][]byte{respRec(recAck, 0, 0, nil), respRec(recDone, 0, codeBounds, nil)}, 0, 1},
		{"ReadDataForSend", send, 1, [][]byte{respRec(recRData, 0, 0, zz[:8])}, 0, 0},
		{"ReadDataWrongID", read, 1, [][]byte{respRec(recRData, 7, 0, zz[:8])}, 0, 0},
		{"ReadDataTooLong", read, 1, [][]byte{respRec(recRData, 0, 0, zz)}, 16, 0},
		{"ReadDataTooLongInTwo", read, 1, [][]byte{respRec(recRData, 0, 0, zz[:12]), respRec(recRData, 0, 0, zz[:12])}, 16, 0},
		{"ReadDataAfterAck", read, 1, [][]byte{respRec(recAck, 0, 0, nil), respRec(recRData, 0, 0, zz[:8])}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, a := v.attack(t, rawOpts{})
			c.post(t, a, c.n)
			// The victim's messages arrive on its request ring.
			for range c.n {
				for deadline := time.Now().Add(hostileTimeout); ; {
					b, err := r.l.rx.reqIn.peek()
					if err != nil {
						t.Fatal(err)
					}
					if b != nil {
						r.l.rx.reqIn.advance(len(b))
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the victim's message did not come")
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			r.l.rx.reqIn.publish()
			r.put(t, true, c.resp...)
			if err := terminated(t, a); !errors.Is(err, errCorrupt) {
				t.Errorf("the victim's queue pair failed with %v, want %v", err, errCorrupt)
			}
			// Every work request completes, none successfully but an
			// acknowledged one.
			ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
			defer cancel()
			wcs := make([]verbs.WC, c.n)
			if _, err := a.cq.Wait(ctx, wcs, c.n); err != nil {
				t.Fatal(err)
			}
			for i, wc := range wcs {
				if ok := wc.Status == verbs.StatusSuccess; ok != (i < c.acked) {
					t.Errorf("work request %d completed with %v", wc.WRID, wc.Status)
				}
			}
			v.loc.expect(4096-16, zz[:c.place])
			r.close()
			v.settled(t)
			v.after(t)
			v.loc.want = bytes.Clone(v.loc.buf) // as the READ left it, for the next case
		})
	}
}

// awaitRingWrite waits for the victim's RDMA WRITE to key to come through
// the request ring (not placed directly), calling check, if not nil,
// before each look.
func (r *raw) awaitRingWrite(t *testing.T, key mreg.Key, check func()) {
	t.Helper()
	for deadline := time.Now().Add(hostileTimeout); ; {
		if check != nil {
			check()
		}
		b, err := r.l.rx.reqIn.peek()
		if err != nil {
			t.Fatal(err)
		}
		if b != nil {
			if b[4] != recReq || verbs.Opcode(b[5]) != verbs.OpWrite || binary.LittleEndian.Uint32(b[16:]) != uint32(key) {
				t.Fatalf("the victim sent % x, want its WRITE", b)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE did not come through the ring")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// publishEntry writes a forged registration into the raw peer's table,
// which the victim reads as the peer's published regions.
func (r *raw) publishEntry(rkey mreg.Key, addr, n uint64, arena uint32, off uint64) {
	e := &r.l.mine[slotOf(rkey)]
	e.state.Store(0)
	e.lkey.Store(uint32(rkey) ^ 1<<30)
	e.rkey.Store(uint32(rkey))
	e.access.Store(uint32(mreg.LocalWrite | mreg.RemoteWrite | mreg.RemoteRead))
	e.addr.Store(addr)
	e.n.Store(n)
	e.arena.Store(arena)
	e.arenaOff.Store(off)
	e.state.Store(entryLive)
}

// sendArena hands the victim a shared-allocator arena of size bytes (a
// sealed memfd) as arena id, and returns the raw peer's own mapping of it.
func (r *raw) sendArena(t *testing.T, id uint32, size uint64) []byte {
	t.Helper()
	fd, m, err := createArena(size)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	t.Cleanup(func() { unix.Munmap(m) })
	if _, _, err := r.conn.WriteMsgUnix(arenaMsgBytes(arenaAdd, id, size), unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	return m
}

// peerArenas returns how many of the raw peer's arenas the victim's end
// of a connection has mapped.
func (v *victim) peerArenas(a accepted) int {
	for _, s := range v.p.Stats() {
		if s.QPNum == a.qp.Num() {
			return s.PeerArenas
		}
	}
	return -1
}

// waitArenas waits until the victim's end has mapped n of the peer's
// arenas.
func (v *victim) waitArenas(t *testing.T, a accepted, n int) {
	t.Helper()
	for deadline := time.Now().Add(hostileTimeout); v.peerArenas(a) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("the victim mapped %d of the peer's arenas, want %d", v.peerArenas(a), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHostileArenaEntries publishes registrations that lie about where
// they lie in a shared-allocator arena the victim mapped: beyond its end,
// at an offset that overflows, longer than the arena, in an arena that
// was never handed over. The victim's RDMA WRITE to them must not be a
// plain copy outside its mapping: it goes through the ring instead, and
// no byte of the arena changes. A truthful entry gets the plain copy, at
// the right place.
func TestHostileArenaEntries(t *testing.T) {
	v := newVictim(t)
	const key = mreg.Key(0x5a5a0000 | 17)
	const addr = 0x7f00_0000_0000
	data := bytes.Repeat([]byte("arena!!!"), 8)
	copy(v.loc.region(), data)
	v.loc.want = bytes.Clone(v.loc.buf)
	for _, c := range []struct {
		name  string
		n     uint64 // the region's length
		arena uint32
		off   uint64
		plain bool // a truthful entry: the WRITE is a plain copy at off
	}{
		{"Truthful", 64, 1, 4096 + 128, true},
		{"PastArenaEnd", 64, 1, 2*4096 - 32, false},
		{"OffsetBeyondArena", 64, 1, 1 << 40, false},
		{"OffsetOverflows", 64, 1, 1<<64 - 16, false},
		{"LongerThanArena", 3 * 4096, 1, 0, false},
		{"UnknownArena", 64, 2, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, a := v.attack(t, rawOpts{})
			m := r.sendArena(t, 1, 2*4096)
			v.waitArenas(t, a, 1)
			before := bytes.Clone(m)
			r.publishEntry(key, addr, c.n, c.arena, c.off)
			if err := a.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpWrite, SGL: []verbs.SGE{v.loc.mr.SGE(0, 64)},
				RKey: key, RemoteAddr: addr}); err != nil {
				t.Fatal(err)
			}
			want := before
			if c.plain {
				want = bytes.Clone(before)
				copy(want[c.off:], data)
				ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
				defer cancel()
				wcs := make([]verbs.WC, 1)
				if _, err := a.cq.Wait(ctx, wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
					t.Fatalf("the WRITE: %v %v", err, wcs[0].Status)
				}
			} else {
				r.awaitRingWrite(t, key, nil)
			}
			if !bytes.Equal(m, want) {
				t.Error("the arena does not hold what it should")
			}
			if shared := v.shared(a); shared != map[bool]uint64{true: 1, false: 0}[c.plain] {
				t.Errorf("%d plain copies", shared)
			}
			r.close()
			v.settled(t)
			v.after(t)
		})
	}
}

// shared returns the plain copies the victim's end of a connection made.
func (v *victim) shared(a accepted) uint64 {
	for _, s := range v.p.Stats() {
		if s.QPNum == a.qp.Num() {
			return s.Shared
		}
	}
	return 0
}

// TestHostileArenaMessages sends the victim's socket arena messages that
// break the rules: unsealed or partly sealed memfds, a size that is not
// the memfd's or not whole pages, zero or above the largest arena, no
// descriptor or two, a pipe, arena id zero or one already mapped, bad
// magic numbers, lengths and kinds, a drop of an arena never handed over,
// and a flood of descriptors. None is mapped and every descriptor is
// closed (the descriptors of the process stay as they were); each is
// followed by a valid arena, which is mapped, and the connection keeps
// working.
func TestHostileArenaMessages(t *testing.T) {
	v := newVictim(t)
	r, a := v.attack(t, rawOpts{})
	const page = 4096
	memfd := func(t *testing.T, size uint64, seals int) int {
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	pipe := func(t *testing.T) int {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		return p[0]
	}
	id := uint32(100) // of the valid arenas
	mapped := 0
	r.sendArena(t, 1, page)
	mapped++
	v.waitArenas(t, a, mapped)
	for _, c := range []struct {
		name string
		msg  []byte
		fds  func(t *testing.T) []int
	}{
		{"Unsealed", arenaMsgBytes(arenaAdd, 2, page), func(t *testing.T) []int { return []int{memfd(t, page, 0)} }},
		{"GrowNotSealed", arenaMsgBytes(arenaAdd, 2, page),
			func(t *testing.T) []int { return []int{memfd(t, page, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)} }},
		{"SizeNotTheMemfds", arenaMsgBytes(arenaAdd, 2, 2*page), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"SizeNotWholePages", arenaMsgBytes(arenaAdd, 2, 1000), func(t *testing.T) []int { return []int{memfd(t, 1000, wantSeals)} }},
		{"SizeZero", arenaMsgBytes(arenaAdd, 2, 0), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"SizeAboveLargest", arenaMsgBytes(arenaAdd, 2, 2*maxArena), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"NoDescriptor", arenaMsgBytes(arenaAdd, 2, page), nil},
		{"TwoDescriptors", arenaMsgBytes(arenaAdd, 2, page),
			func(t *testing.T) []int { return []int{memfd(t, page, wantSeals), memfd(t, page, wantSeals)} }},
		{"Pipe", arenaMsgBytes(arenaAdd, 2, page), func(t *testing.T) []int { return []int{pipe(t)} }},
		{"IDZero", arenaMsgBytes(arenaAdd, 0, page), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"IDMapped", arenaMsgBytes(arenaAdd, 1, page), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"DropUnknown", arenaMsgBytes(arenaDrop, 77, page), nil},
		{"DropWithDescriptor", arenaMsgBytes(arenaDrop, 78, page), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"BadMagic", func() []byte { b := arenaMsgBytes(arenaAdd, 2, page); b[0]++; return b }(),
			func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"Short", arenaMsgBytes(arenaAdd, 2, page)[:arenaMsgLen-1], func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"Long", append(arenaMsgBytes(arenaAdd, 2, page), 0), func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"UnknownKind", func() []byte { b := arenaMsgBytes(arenaAdd, 2, page); b[4] = 3; return b }(),
			func(t *testing.T) []int { return []int{memfd(t, page, wantSeals)} }},
		{"DescriptorFlood", arenaMsgBytes(arenaAdd, 2, page), func(t *testing.T) []int {
			fds := make([]int, 250) // SCM_MAX_FD is 253
			for i := range fds {
				fds[i] = pipe(t)
			}
			return fds
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := openFDs(t)
			for range 4 {
				var fds []int
				var oob []byte
				if c.fds != nil {
					fds = c.fds(t)
					oob = unix.UnixRights(fds...)
				}
				_, _, err := r.conn.WriteMsgUnix(c.msg, oob, nil)
				closeFDs(fds)
				if err != nil {
					t.Fatal(err)
				}
			}
			// A valid arena after it: once mapped, the bad ones were
			// handled (the socket's messages are handled in order).
			r.sendArena(t, id, page)
			id++
			mapped++
			v.waitArenas(t, a, mapped)
			fdsBack(t, before)
			if a.qp.State() != verbs.StateReadyToSend {
				t.Fatalf("the victim's end is %v: %v", a.qp.State(), a.qp.Err())
			}
			v.after(t)
		})
	}
	// The connection works: a WRITE from the raw peer is acknowledged.
	r.put(t, false, reqRec(verbs.OpWrite, modeInline, 0, r.nextID(), uint32(v.w.mr.RKey()), v.w.mr.Addr()+64, 8, []byte("afterall")))
	if got := r.responses(t, 1); got[0].typ != recAck || got[0].id != r.id-1 {
		t.Errorf("the victim answered %v, want an acknowledgement", got)
	}
	v.w.expect(64, []byte("afterall"))
	r.close()
	v.settled(t)
	v.after(t)
}

// TestHostileListener has the victim dial a raw listener that breaks the
// rendezvous: hellos and replies with bad magic numbers, versions, codes,
// kinds, RNR policies and lengths, private data over the limit, a hang-up
// instead of an answer; and one that accepts and then forges a key. Each
// dial fails (with an error wrapping errProtocol for the malformed
// messages), the queue pair is back in Init with no connection left
// behind, and the honest connection of the victim keeps working.
func TestHostileListener(t *testing.T) {
	v := newVictim(t)
	dir, err := os.MkdirTemp("", "shmh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: dir + "/raw", Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hello := func(mod func(b []byte) []byte) []byte {
		b := make([]byte, helloLen)
		putHello(b, helloMsg{})
		if mod != nil {
			b = mod(b)
		}
		return b
	}
	accept := rawReply(replyAccept, byte(verbs.RNRFail), 0, nil)
	type script struct {
		hello []byte // nil: hang up instead
		reply []byte // nil: hang up instead
		// then, if set, runs once the victim is connected, as side 1
		then func(t *testing.T, r *raw)
	}
	cases := []struct {
		name    string
		s       script
		wantErr error
	}{
		{"HelloBadMagic", script{hello: hello(func(b []byte) []byte { b[1]++; return b })}, errProtocol},
		{"HelloBadVersion", script{hello: hello(func(b []byte) []byte { b[4]++; return b })}, errProtocol},
		{"HelloShort", script{hello: hello(func(b []byte) []byte { return b[:helloLen-1] })}, errProtocol},
		{"HelloLong", script{hello: hello(func(b []byte) []byte { return append(b, 0) })}, errProtocol},
		{"HelloEmpty", script{hello: []byte{}}, io.EOF}, // an empty packet reads as the end
		{"HelloUnknownCode", script{hello: hello(func(b []byte) []byte { b[6] = 2; return b })}, errProtocol},
		{"RefusalOfHelloLength", script{hello: hello(func(b []byte) []byte { b[6] = helloRefused; return b })}, errProtocol},
		{"NoHello", script{}, io.EOF},
		{"ReplyBadMagic", script{hello: hello(nil), reply: func() []byte { b := bytes.Clone(accept); b[0]++; return b }()}, errProtocol},
		{"ReplyUnknownKind", script{hello: hello(nil), reply: rawReply(9, byte(verbs.RNRFail), 0, nil)}, errProtocol},
		{"ReplyRNRZero", script{hello: hello(nil), reply: rawReply(replyAccept, 0, 0, nil)}, errProtocol},
		{"ReplyRNRUnknown", script{hello: hello(nil), reply: rawReply(replyAccept, 3, 0, nil)}, errProtocol},
		{"ReplyPrivateTooLong", script{hello: hello(nil),
			reply: rawReply(replyAccept, byte(verbs.RNRFail), 0, make([]byte, verbs.MaxPrivateData+1))}, errProtocol},
		{"ReplyRejectPrivateTooLong", script{hello: hello(nil),
			reply: rawReply(replyReject, 0, 0, make([]byte, verbs.MaxPrivateData+88))}, errProtocol},
		{"ReplyPrivateLengthLies", script{hello: hello(nil), reply: func() []byte {
			b := rawReply(replyAccept, byte(verbs.RNRFail), 0, []byte("abc"))
			binary.LittleEndian.PutUint16(b[8:], 2)
			return b
		}()}, errProtocol},
		{"ReplyTruncated", script{hello: hello(nil), reply: accept[:replyLen-1]}, errProtocol},
		{"NoReply", script{hello: hello(nil)}, io.EOF},
		{"ForgedKeyAfterAccept", script{hello: hello(nil), reply: accept, then: func(t *testing.T, r *raw) {
			r.put(t, false, reqRec(verbs.OpWrite, modeInline, 0, 0, uint32(v.w.mr.RKey())^(mreg.MaxRegions+1), v.w.mr.Addr(), 8, []byte("hostile!")))
		}}, mreg.ErrInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			served := make(chan *raw, 1)
			go func() {
				defer close(served)
				conn, err := ln.AcceptUnix()
				if err != nil {
					return
				}
				if c.s.hello == nil {
					conn.Close()
					return
				}
				conn.Write(c.s.hello)
				b := make([]byte, maxHandshake)
				oob := make([]byte, unix.CmsgSpace(4*4))
				n, oobn, _, _, err := conn.ReadMsgUnix(b, oob)
				fds := parseFDs(oob[:oobn])
				defer closeFDs(fds)
				if err != nil || c.s.reply == nil || len(fds) != 1 {
					conn.Close()
					return
				}
				req, err := parseRequest(b[:n])
				if err != nil {
					conn.Close()
					return
				}
				lo := newLayout(req.reqSize, req.respSize)
				m, err := mapPeer(fds[0], lo.total)
				if err != nil {
					conn.Close()
					return
				}
				conn.Write(c.s.reply)
				served <- &raw{l: newLink(mustNew(), 1, m, lo, conn), conn: conn}
			}()
			cq, _ := v.dev.CreateCQ(16, verbs.CQOptions{})
			qp, err := v.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Close()
			ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
			defer cancel()
			_, err = qp.Connect(ctx, Scheme+dir+"/raw", nil)
			r := <-served
			if r != nil {
				defer r.close()
			}
			if c.s.then == nil {
				if !errors.Is(err, c.wantErr) {
					t.Errorf("Connect = %v, want an error wrapping %v", err, c.wantErr)
				}
				if s := qp.State(); s != verbs.StateInit {
					t.Errorf("the queue pair is %v after the failed connect, want Init", s)
				}
			} else {
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
				c.s.then(t, r)
				if err := terminated(t, accepted{qp: qp}); !errors.Is(err, c.wantErr) {
					t.Errorf("the victim's queue pair failed with %v, want %v", err, c.wantErr)
				}
				if got := r.responses(t, 0); len(got) != 2 || got[0].typ != recDone || got[0].code != codeInvalidKey {
					t.Errorf("the victim answered %v, want the outcome code %d and a TERM", got, codeInvalidKey)
				}
			}
			v.settled(t)
			v.after(t)
		})
	}
}
