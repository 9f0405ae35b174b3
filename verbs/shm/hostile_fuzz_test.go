//go:build linux

package shm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/verbstest"
)

// fuzzKeys patches the request records in ring bytes (as the ring's
// framing finds them from the start) so that the fuzzer reaches valid
// operations: a key from 1 to len(regions) becomes that region's remote
// key, and an address below 64 KiB an offset into it.
func fuzzKeys(b []byte, regions []*verbs.MR) {
	for pos := 0; pos+recHdr <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[pos:]))
		if n < recHdr {
			return
		}
		if b[pos+4] == recReq && pos+reqHdr <= len(b) {
			k := binary.LittleEndian.Uint32(b[pos+16:])
			if k >= 1 && int(k) <= len(regions) {
				mr := regions[k-1]
				binary.LittleEndian.PutUint32(b[pos+16:], uint32(mr.RKey()))
				if a := binary.LittleEndian.Uint64(b[pos+24:]); a < 64<<10 {
					binary.LittleEndian.PutUint64(b[pos+24:], mr.Addr()+a)
				}
			}
		}
		pos += align8(n)
	}
}

// FuzzHostileRings writes arbitrary bytes, as they are, into a raw peer's
// request ring and response ring, against the victim of the hostile-peer
// tests (request records' keys and addresses patched by fuzzKeys, so that
// some operations are valid): whatever the bytes, no goroutine of the
// victim panics, no byte outside its remote-writable region is written
// (nor its guards), the victim lets go of the connection once the raw
// peer hangs up, and its honest connection keeps working.
func FuzzHostileRings(f *testing.F) {
	v := newVictim(f)
	regions := []*verbs.MR{v.w.mr, v.ro.mr, v.loc.mr, v.rbuf.mr, v.dead}
	recs := func(rs ...[]byte) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, r...)
			b = append(b, make([]byte, align8(len(r))-len(r))...)
		}
		return b
	}
	w := func(id uint32, key uint32, off, n uint64, body string) []byte {
		return reqRec(verbs.OpWrite, modeInline, 0, id, key, off, n, []byte(body))
	}
	read := reqRec(verbs.OpRead, modeRData, 0, 2, 2, 16, 64, nil)
	f.Add(recs(w(0, 1, 8, 5, "fuzz!")), []byte(nil))
	f.Add(recs(w(0, 1, 8, 5, "fuzz!"), read), []byte(nil))
	f.Add(recs(w(0, 1, 4090, 11, "hello"), rec(recFrag, 0, []byte(" world"))), []byte(nil))
	f.Add(recs(w(0, 1, 0, 11, "hello")), []byte(nil))
	f.Add(recs(w(0, 2, 0, 5, "fuzz!")), []byte(nil))
	f.Add(recs(w(0, 5, 0, 5, "fuzz!")), []byte(nil))
	f.Add(recs(reqRec(verbs.OpSend, modeInline, 0, 0, 0, 0, 4, []byte("send"))), []byte(nil))
	f.Add(recs(w(0, 1, 8, 5, "fuzz!")), recs(respRec(recTerm, termDisconnect, 0, []byte("bye"))))
	f.Add([]byte(nil), recs(respRec(recAck, 0, 0, nil)))
	f.Add([]byte(nil), recs(respRec(recRData, 0, 0, []byte("data"))))
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		r, a := v.attack(t, rawOpts{})
		put := func(p *producer, b []byte) {
			n := min(len(b), int(p.r.size))
			copy(p.r.data, b[:n])
			p.tail = uint64(align8(n))
			if p.tail > p.r.size {
				p.tail = p.r.size
			}
			p.r.ctl.tail.Store(p.tail)
		}
		reqb := append([]byte(nil), req...)
		fuzzKeys(reqb, regions)
		put(&r.l.tx.reqOut, reqb)
		put(&r.l.tx.respOut, resp)
		r.l.peer.ringAlways()
		// Until the victim read both rings or failed the connection, or
		// waits for more (a message cut short).
		read := func() bool {
			return r.l.tx.reqOut.r.ctl.head.Load() == r.l.tx.reqOut.tail &&
				r.l.tx.respOut.r.ctl.head.Load() == r.l.tx.respOut.tail
		}
		for deadline := time.Now().Add(50 * time.Millisecond); !read() && time.Now().Before(deadline); {
			select {
			case <-a.qp.Done():
				deadline = time.Time{}
			case <-time.After(100 * time.Microsecond):
			}
		}
		r.close()
		v.settled(t)
		// The fuzzer may write any bytes of the remote-writable region:
		// its guards are checked.
		copy(v.w.want[verbstest.Guard:len(v.w.want)-verbstest.Guard], v.w.region())
		v.after(t)
	})
}
