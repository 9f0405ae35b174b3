package dynproto_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

// FuzzFrameDecode: Decode never panics; whatever it accepts encodes back to
// the same bytes; whatever Encode writes decodes to the same frame.
func FuzzFrameDecode(f *testing.F) {
	var b [dynproto.FrameSize]byte
	for _, fr := range []dynproto.Frame{
		{Type: dynproto.FrameAdvert, Flags: dynproto.FlagWaitAll, Phase: 3, Seq: 1 << 40, ID: 7, Len: 4096, RKey: 0xdeadbeef, Addr: 0x7f0000001000},
		{Type: dynproto.FrameIndirect, Flags: dynproto.FlagEOM, Credits: 3, Seq: 99, Len: 12, RingOff: 4000},
		{Type: dynproto.FrameAck, Flags: dynproto.FlagTooLong | dynproto.FlagSlot, Len: 1 << 20, Msgs: 2},
	} {
		fr.Encode(b[:])
		f.Add(append([]byte(nil), b[:]...))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr dynproto.Frame
		if err := fr.Decode(data); err != nil {
			if !errors.Is(err, dynproto.ErrFrame) {
				t.Fatalf("error %v does not match ErrFrame", err)
			}
			return
		}
		var out [dynproto.FrameSize]byte
		fr.Encode(out[:])
		if !bytes.Equal(out[:], data[:dynproto.FrameSize]) {
			t.Fatalf("re-encoding %v:\n got %x\nwant %x", fr, out, data[:dynproto.FrameSize])
		}
		var again dynproto.Frame
		if err := again.Decode(out[:]); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fr, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzEngine drives a two-engine world from the fuzzer's bytes: the first
// bytes choose the configuration (every field of Config, as the random
// worlds vary them) and scripts, the rest choose each move. The world
// checks stream integrity and placement at every step; at the end the
// world must have finished cleanly.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 0, 3, 3, 2, 2, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{1, 1, 8, 1, 1, 3, 200, 7, 7, 7, 7, 0, 0, 0, 1, 2})
	f.Add([]byte{2, 0, 1, 2, 4, 4, 9, 9, 3, 3, 3, 3, 3, 3, 1, 0, 1, 0})
	f.Add([]byte{0, 1, 4, 2, 3, 1, 6, 255, 128, 64, 32, 16, 8, 4, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{data: data}
		mode := []dynproto.Mode{dynproto.Dynamic, dynproto.DirectOnly, dynproto.IndirectOnly}[r.next()%3]
		typ := []dynproto.SockType{dynproto.Stream, dynproto.SeqPacket}[r.next()%2]
		ring := [2]int{1 + int(r.next()%32), 1 + int(r.next()%32)}
		frames := [2]int{1 + int(r.next()%4), 1 + int(r.next()%4)}
		var cfg sim.Config
		for i := range 2 {
			cfg.Engine[i] = dynproto.Config{
				Mode: mode, Type: typ,
				RecvBuffer: ring[i], PeerRecvBuffer: ring[1-i],
				Frames: frames[i], PeerFrames: frames[1-i],
				MaxGather: 1 + int(r.next()%3),
			}
		}
		for i := range 2 {
			c := &cfg.Engine[i]
			if b := r.next(); b&1 != 0 {
				c.AckThreshold = 1 + int(b>>1)%ring[i]
			}
			c.NoHeldHint = r.next()&1 != 0
			c.HintMin = int(r.next() % 24)
			c.AdvertMin = int(r.next() % 40)
			c.MaxIndirect = int(r.next() % 17)
		}
		for i := range 2 {
			s := sim.Script{Shutdown: true, DrainLen: 41, Close: r.next()%8 == 0}
			for range r.next() % 6 {
				s.Sends = append(s.Sends, int(r.next()%41))
			}
			for range r.next() % 6 {
				b := r.next()
				s.Recvs = append(s.Recvs, sim.RecvOp{Len: 1 + int(b%40), WaitAll: b&0x80 != 0})
			}
			cfg.Scripts[i] = s
		}
		w, err := sim.New(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Fuzzer bytes pick moves while they last, then the first
		// enabled move, so that every input runs to the end.
		runRandom(t, w, func(n int) int { return int(r.next()) % n }, nil)
	})
}

type byteReader struct {
	data []byte
	pos  int
}

func (r *byteReader) next() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}
