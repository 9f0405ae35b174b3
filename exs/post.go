package exs

import (
	"fmt"
	"math"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// The engine's actions as work requests: do turns each into WRITEs and
// frame SENDs, gathered in a batch that flush posts at once.

// do carries out one action, or reports that it must wait for room in the
// send queue.
func (c *conn) do(a *dynproto.Action) bool {
	s := c.s
	switch a.Kind {
	case dynproto.WriteDirect, dynproto.WriteIndirect:
		if c.failed || c.draining {
			return true
		}
		return c.addWrite(a)
	case dynproto.SendFrame:
		if c.failed || c.draining {
			return true
		}
		return c.addFrame(a)
	case dynproto.CopyOut:
		o := &s.ops[uint32(a.ID)]
		if o.vec != nil {
			o.scatter(a.ID, a.Off, c.ring[a.RingOff:a.RingOff+a.Len])
		} else {
			copy(o.buf[a.Off:a.Off+a.Len], c.ring[a.RingOff:a.RingOff+a.Len])
		}
	case dynproto.SendDone, dynproto.RecvDone:
		if a.Kind == dynproto.SendDone && a.ID&idChunk != 0 {
			c.chunkDone(a)
			return true
		}
		if o := &s.ops[uint32(a.ID)]; o.vst.split {
			done, last := o.pieceDone(a, c.eng.Gone())
			if !last {
				return true
			}
			a = &done
		}
		if a.Err != nil && a.Err == c.deadErr {
			c.canceled++
		}
		n := a.Len
		if a.Kind == dynproto.SendDone && a.Err != nil {
			n = c.moved(a.ID)
		}
		s.complete(int32(a.ID), n, a.Err, nil)
		if a.EOF {
			s.doneEv[len(s.doneEv)-1].EOF = true
		}
	}
	return true
}

// addWrite adds RDMA WRITEs for a write action to the batch, extending
// the previous WRITE when the bytes continue it. The bytes of a vectored
// send may span several of its buffers: one scatter/gather entry each,
// up to maxGather per WRITE, in as many WRITEs as needed.
func (c *conn) addWrite(a *dynproto.Action) bool {
	if a.Len == 0 {
		// An empty message: no work request, but its WriteDone comes
		// with the frame's completion like any write's.
		c.pendWrites++
		c.notePosted(a.ID, 0)
		return true
	}
	key, raddr := mreg.Key(a.RKey), a.Addr
	if a.Kind == dynproto.WriteIndirect {
		key, raddr = c.peerKey, c.peerAddr+uint64(a.RingOff)
	}
	sg := c.sg[:0]
	if a.ID&idChunk == 0 && c.s.ops[a.ID].vec != nil {
		sg = c.s.ops[a.ID].appendSGEs(sg, a.Off, a.Len)
	} else {
		addr, lkey := c.sendSrc(a.ID) // an operation's buffer, or a sendfile's chunk
		sg = append(sg, verbs.SGE{Addr: addr + uint64(a.Off), Len: uint32(a.Len), LKey: lkey})
	}
	c.sg = sg
	// The open WRITE takes the entries it has room for; its last entry
	// takes the first one if the local memory continues it (one copy
	// instead of two for a provider that copies).
	extend, merge, room := false, false, 0
	plan := func() {
		extend = c.open >= 0 && key == c.openKey && raddr == c.openEnd
		merge = extend && adjacent(&c.sges[c.sgeUsed-1], &sg[0])
		room = 0
		if extend {
			room = min(maxGather-len(c.wrs[c.open].SGL), len(sg)-b2i(merge))
		}
	}
	plan()
	rest := len(sg) - b2i(merge) - room // entries for new WRITEs
	if c.sgeUsed+len(sg) > len(c.sges) || len(c.wrs)+writesFor(rest) > cap(c.wrs) {
		c.flush()
		plan()
		rest = len(sg)
	}
	// Leave room for the frame that announces the writes: a write
	// waiting for its frame completes only with it.
	if n := writesFor(rest); n > 0 && (c.outstanding+n >= c.sendDepth || c.failed) {
		return c.failed
	}
	if merge {
		c.sges[c.sgeUsed-1].Len += sg[0].Len
		c.openEnd += uint64(sg[0].Len)
		raddr += uint64(sg[0].Len)
		sg = sg[1:]
	}
	if room > 0 {
		w := &c.wrs[c.open]
		copy(c.sges[c.sgeUsed:], sg[:room])
		c.sgeUsed += room
		w.SGL = w.SGL[:len(w.SGL)+room]
		c.openEnd = raddr + sgLen(sg[:room])
	}
	raddr += sgLen(sg[:room])
	for i := room; i < len(sg); {
		k := min(maxGather, len(sg)-i)
		copy(c.sges[c.sgeUsed:], sg[i:i+k])
		c.wrs = append(c.wrs, verbs.SendWR{
			WRID:       wridWrite,
			Opcode:     verbs.OpWrite,
			SGL:        c.sges[c.sgeUsed : c.sgeUsed+k],
			RemoteAddr: raddr,
			RKey:       key,
		})
		c.sgeUsed += k
		raddr += sgLen(sg[i : i+k])
		c.open, c.openKey, c.openEnd = len(c.wrs)-1, key, raddr
		c.outstanding++
		c.pendWriteWRs++
		i += k
	}
	c.pendWrites++
	c.notePosted(a.ID, a.Len)
	return true
}

// adjacent reports whether entry b continues entry a in local memory, so
// that a can take it: same key, and a length that fits.
func adjacent(a, b *verbs.SGE) bool {
	return a.LKey == b.LKey && a.Addr+uint64(a.Len) == b.Addr && uint64(a.Len)+uint64(b.Len) <= math.MaxUint32
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writesFor returns how many WRITEs carry n scatter/gather entries.
func writesFor(n int) int {
	return (max(n, 0) + maxGather - 1) / maxGather
}

// sgLen returns the bytes of the entries of sg.
func sgLen(sg []verbs.SGE) uint64 {
	var n uint64
	for i := range sg {
		n += uint64(sg[i].Len)
	}
	return n
}

// addFrame adds the SEND of a frame to the batch. The frame goes out of
// the send buffer of its send queue slot: with fewer than sendDepth work
// requests outstanding, the frame that used the slot before has completed.
func (c *conn) addFrame(a *dynproto.Action) bool {
	if len(c.wrs) == cap(c.wrs) || c.sgeUsed == len(c.sges) {
		c.flush()
	}
	if c.outstanding >= c.sendDepth || c.failed {
		return c.failed
	}
	slot := int(c.frameSeq % uint64(c.sendDepth))
	f := a.Frame
	if f.Type == dynproto.FrameAdvert {
		o := &c.s.ops[uint32(a.ID)]
		f.RKey, f.Addr = o.advertised(a.ID)
	}
	f.Encode(c.frSend[slot*dynproto.FrameSize:])
	c.sges[c.sgeUsed] = c.frSendMR.SGE(slot*dynproto.FrameSize, dynproto.FrameSize)
	c.wrs = append(c.wrs, verbs.SendWR{
		WRID:   wridFrame | uint64(c.pendWriteWRs)<<24 | uint64(c.pendWrites),
		Opcode: verbs.OpSend,
		Flags:  verbs.Signaled,
		SGL:    c.sges[c.sgeUsed : c.sgeUsed+1],
	})
	c.sgeUsed++
	c.frameSeq++
	if f.Type == dynproto.FrameFin {
		c.finSeq = c.frameSeq
	}
	c.outstanding++
	c.pendWrites, c.pendWriteWRs = 0, 0
	c.open = -1
	return true
}

// flush posts the batch.
func (c *conn) flush() {
	if len(c.wrs) == 0 {
		return
	}
	n, err := c.qp.PostSendBatch(c.wrs)
	if err != nil && c.pending == nil && !c.failed {
		c.outstanding -= len(c.wrs) - n
		c.pending = fmt.Errorf("%w: %w", ErrConnAborted, err)
	}
	c.wrs = c.wrs[:0]
	c.sgeUsed = 0
	c.open = -1
}
