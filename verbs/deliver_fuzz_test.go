package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/inproc"
)

// The target's memory in FuzzDeliver: one buffer, every region in it with
// guard bytes between them, so that a byte written outside what a
// message may reach shows.
//
//	[guard][rw: remote write][guard][ro: remote read][guard][recv: local write][guard]
const (
	fzGuard = 32
	fzSize  = 64
	fzRW    = fzGuard
	fzRO    = fzRW + fzSize + fzGuard
	fzRecv  = fzRO + fzSize + fzGuard
	fzTotal = fzRecv + fzSize + fzGuard
)

// patternReader yields byte i of a message as byte(i*7+1): a payload of
// any length without allocating it.
type patternReader struct{ i int }

func (r *patternReader) Read(p []byte) (int, error) {
	for k := range p {
		p[k] = byte((r.i+k)*7 + 1)
	}
	r.i += len(p)
	return len(p), nil
}

// FuzzDeliver hands the target's verbs.Endpoint, as a provider does with
// what arrives from the wire, messages whose every field the fuzzer
// chooses (opcode, key, address, length, immediate data), and checks the
// rules every provider relies on: a message is placed only where its key
// may reach (the live rkey of a region with the right, the whole range
// inside it) or, for a SEND, into the posted RECV when it fits; nothing
// else is written, not a byte on a refusal; a READ returns the region's
// bytes; Deliver's outcome says which.
func FuzzDeliver(f *testing.F) {
	f.Add(uint8(verbs.OpWrite), uint8(0), uint32(0), int64(0), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(0), uint32(0), int64(fzSize-4), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(0), uint32(0), int64(-1), uint32(1), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(0), uint32(1<<20), int64(0), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(1), uint32(0), int64(0), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(2), uint32(0), int64(0), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpWrite), uint8(0), uint32(0), int64(8), uint32(0xffffffff), uint32(0))
	f.Add(uint8(verbs.OpWriteWithImm), uint8(0), uint32(0), int64(0), uint32(fzSize), uint32(7))
	f.Add(uint8(verbs.OpRead), uint8(2), uint32(0), int64(0), uint32(fzSize), uint32(0))
	f.Add(uint8(verbs.OpRead), uint8(0), uint32(0), int64(0), uint32(8), uint32(0))
	f.Add(uint8(verbs.OpSend), uint8(0), uint32(0), int64(0), uint32(fzSize), uint32(0))
	f.Add(uint8(verbs.OpSendWithImm), uint8(0), uint32(0), int64(0), uint32(fzSize+1), uint32(9))
	f.Add(uint8(0), uint8(0), uint32(0), int64(0), uint32(1), uint32(0))
	f.Add(uint8(9), uint8(4), uint32(0), int64(0), uint32(1), uint32(0))
	f.Fuzz(func(t *testing.T, op, keySel uint8, keyXor uint32, off int64, n, imm uint32) {
		fuzzDeliver(t, verbs.Opcode(op), keySel, keyXor, off, n, imm)
	})
}

func fuzzDeliver(t *testing.T, op verbs.Opcode, keySel uint8, keyXor uint32, off int64, n, imm uint32) {
	p := faults.New(inproc.New())
	defer p.Close()
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8, verbs.CQOptions{})
	qa, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	qb, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, RNR: verbs.RNRFail})

	mem := make([]byte, fzTotal)
	for i := range mem {
		mem[i] = 0xA5
	}
	regions := []struct {
		off    int
		access mreg.Access
	}{{fzRW, mreg.LocalWrite | mreg.RemoteWrite}, {fzRO, mreg.RemoteRead}, {fzRecv, mreg.LocalWrite}}
	mrs := make([]*verbs.MR, len(regions))
	for i, r := range regions {
		for k := range fzSize {
			mem[r.off+k] = byte(i*64 + k)
		}
		if mrs[i], err = pd.RegisterMR(mem[r.off:r.off+fzSize:r.off+fzSize], r.access); err != nil {
			t.Fatal(err)
		}
	}
	rw, ro, rv := mrs[0], mrs[1], mrs[2]
	before := bytes.Clone(mem)
	if err := qb.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{rv.SGE(0, fzSize)}}); err != nil {
		t.Fatal(err)
	}

	ln, err := dev.Listen("inproc:fuzz")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			err = r.Accept(qb, nil)
		}
		done <- err
	}()
	if _, err := qa.Connect(ctx, "inproc:fuzz", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ln.Close()
	var ep *verbs.Endpoint
	for _, c := range p.Conns() {
		if c.Side() == faults.Acceptor {
			ep = c.Endpoint()
		}
	}

	// The message.
	var key mreg.Key
	switch keySel % 6 {
	case 0:
		key = rw.RKey()
	case 1:
		key = rw.LKey()
	case 2:
		key = ro.RKey()
	case 3:
		key = rv.LKey()
	case 4:
		key = 0
	}
	key ^= mreg.Key(keyXor)
	addr := rw.Addr() + uint64(off)
	if keySel%6 == 2 {
		addr = ro.Addr() + uint64(off)
	}
	m := &verbs.Message{Op: op, Imm: imm, RKey: key, RAddr: addr, Len: int(n)}
	var sink bytes.Buffer
	m.Payload = io.LimitReader(&patternReader{}, int64(n))
	m.Sink = &sink
	err = ep.Deliver(m)

	// The model: what the message may do.
	offOf := map[*verbs.MR]int{rw: fzRW, ro: fzRO, rv: fzRecv}
	var want error             // nil: success
	wroteOff, wroteLen := 0, 0 // where the message writes, on success
	switch op {
	case verbs.OpWrite, verbs.OpWriteWithImm, verbs.OpRead:
		access := mreg.RemoteWrite
		if op == verbs.OpRead {
			access = mreg.RemoteRead
		}
		mr := regionOf(key, mrs)
		switch {
		case mr == nil:
			want = mreg.ErrInvalidKey
		case addr < mr.Addr() || addr-mr.Addr() > fzSize || uint64(n) > fzSize-(addr-mr.Addr()):
			want = mreg.ErrBounds
		case key != mr.RKey() || mr.Access()&access == 0:
			want = mreg.ErrAccess
		case op != verbs.OpRead:
			wroteOff, wroteLen = offOf[mr]+int(addr-mr.Addr()), int(n)
		}
	case verbs.OpSend, verbs.OpSendWithImm:
		if n > fzSize {
			want = verbs.ErrTooLong
		} else {
			wroteOff, wroteLen = fzRecv, int(n)
		}
	default:
		want = verbs.ErrInvalid
	}
	what := func() string {
		return fmt.Sprintf("%v key %#x (choice %d) at %+d of the rw region, %d bytes (outcome %v)", op, uint32(key), keySel%6, int64(addr-rw.Addr()), n, err)
	}
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: want success", what())
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: want %v", what(), want)
	}
	// Memory: only [wroteOff, wroteOff+wroteLen) changed, to the payload.
	for i := range mem {
		exp := before[i]
		if j := i - wroteOff; j >= 0 && j < wroteLen {
			exp = byte(j*7 + 1)
		}
		if mem[i] != exp {
			t.Fatalf("%s: byte %d of the target's memory is %#x, want %#x", what(), i, mem[i], exp)
		}
	}
	if op == verbs.OpRead && err == nil {
		o := fzRO + int(addr-ro.Addr())
		if !bytes.Equal(sink.Bytes(), mem[o:o+int(n)]) {
			t.Fatalf("READ returned %x, want %x", sink.Bytes(), mem[o:o+int(n)])
		}
	}
	if err != nil && !errors.Is(err, verbs.ErrNoRecv) {
		// A refused message ends the connection.
		select {
		case <-qb.Done():
		case <-ctx.Done():
			t.Fatalf("%v refused with %v, but the target stays connected", op, err)
		}
	}
	qa.Close()
	qb.Close()
	for _, mr := range mrs {
		if err := mr.Deregister(); err != nil {
			t.Fatalf("deregister after the message: %v", err)
		}
	}
}

// regionOf returns the region of mrs that key names (lkey or rkey), or nil.
func regionOf(key mreg.Key, mrs []*verbs.MR) *verbs.MR {
	for _, mr := range mrs {
		if key == mr.LKey() || key == mr.RKey() {
			return mr
		}
	}
	return nil
}
