package sim

import "github.com/exsgo/exs/dynproto"

// apply carries out endpoint i's actions.
func (w *World) apply(i int, acts []dynproto.Action) {
	for _, a := range acts {
		w.trace(i, "%v", a)
		switch a.Kind {
		case dynproto.WriteDirect, dynproto.WriteIndirect:
			w.applyWrite(i, a)
		case dynproto.SendFrame:
			w.applyFrame(i, a)
		case dynproto.CopyOut:
			w.applyCopy(i, a)
		case dynproto.Discard:
			w.applyDiscard(i, a)
		case dynproto.SendDone:
			w.sendDone(i, a)
		case dynproto.RecvDone:
			w.recvDone(i, a)
		}
		if w.err != nil {
			return
		}
	}
}

// applyWrite checks a write of endpoint i's, reserves the stream-buffer
// bytes or recv bytes it lands on, and holds it for the next frame, with
// which it travels.
func (w *World) applyWrite(i int, a dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	seqpacket := w.cfg.Engine[i].Type == dynproto.SeqPacket
	if a.ID >= uint64(len(p.sendStarts)) || a.Off < 0 || a.Off+a.Len > p.sendLens[a.ID] ||
		a.Len <= 0 && !(a.Len == 0 && a.Kind == dynproto.WriteDirect && seqpacket && p.sendLens[a.ID] == 0) {
		w.failf("endpoint %c: write of send %d [%d:+%d] outside the send", 'A'+i, a.ID, a.Off, a.Len)
		return
	}
	p.writesEmitted++
	p.tWrites++
	p.tBytes += a.Len
	if !seqpacket {
		p.unitsSent += uint64(a.Len)
	}
	if peer.closed {
		// The closed end's memory is gone: the write never lands,
		// and its frame (dropped too) never completes it.
		return
	}
	wr := write{kind: a.Kind, data: make([]byte, a.Len)}
	for k := range wr.data {
		if seqpacket {
			wr.data[k] = messageByte(i, a.ID, a.Off+k)
		} else {
			wr.data[k] = streamByte(i, p.sendStarts[a.ID]+uint64(a.Off+k))
		}
	}
	if a.Kind == dynproto.WriteIndirect {
		wr.ringOff = a.RingOff
		if !w.reserveRing(i, a) {
			return
		}
	} else {
		r, ok := w.reserveRecv(i, a)
		if !ok {
			return
		}
		wr.recv, wr.off = r.id, int(a.Addr)
	}
	p.pendingWrite = append(p.pendingWrite, wr)
}

// reserveRing checks that indirect write a of endpoint i's lands on free
// bytes of the peer's stream buffer, and marks them busy.
func (w *World) reserveRing(i int, a dynproto.Action) bool {
	peer := &w.ep[1-i]
	if a.RingOff < 0 || a.RingOff+a.Len > len(peer.ring) {
		w.failf("endpoint %c: indirect write [%d:+%d] outside the stream buffer of %d", 'A'+i, a.RingOff, a.Len, len(peer.ring))
		return false
	}
	for k := a.RingOff; k < a.RingOff+a.Len; k++ {
		if peer.ringBusy[k] {
			w.failf("endpoint %c: indirect write over stream-buffer byte %d that is not free (overrun)", 'A'+i, k)
			return false
		}
		peer.ringBusy[k] = true
		peer.busy++
	}
	return true
}

// reserveRecv checks that direct write a of endpoint i's lands in a recv of
// the peer's that may take it, on bytes not written before, and marks them
// written.
func (w *World) reserveRecv(i int, a dynproto.Action) (*recvBuf, bool) {
	peer := &w.ep[1-i]
	if a.RKey == 0 || uint64(a.RKey-1) >= uint64(len(peer.recvs)) {
		w.failf("endpoint %c: direct write with unknown key %#x", 'A'+i, a.RKey)
		return nil, false
	}
	r := &peer.recvs[a.RKey-1]
	off := int(a.Addr)
	switch {
	case r.done:
		w.failf("endpoint %c: direct write into recv %d, already complete", 'A'+i, r.id)
	case r.copied:
		w.failf("endpoint %c: direct write into recv %d, which was filled from the stream buffer", 'A'+i, r.id)
	case off < 0 || off+a.Len > len(r.data):
		w.failf("endpoint %c: direct write [%d:+%d] outside the advertised buffer of %d bytes", 'A'+i, off, a.Len, len(r.data))
	}
	if w.err != nil {
		return nil, false
	}
	for k := off; k < off+a.Len; k++ {
		if r.direct[k] {
			w.failf("endpoint %c: direct write over byte %d of recv %d, written before", 'A'+i, k, r.id)
			return nil, false
		}
		r.direct[k] = true
	}
	r.directed = true
	return r, true
}

// defaultMaxGather is MaxGather's documented default.
const defaultMaxGather = 8

// checkTransfer checks the writes emitted since the last frame of endpoint
// i's against the frame f that follows them: a DIRECT or INDIRECT frame
// announces exactly their bytes, gathers from at most MaxGather sends on a
// stream (one write per send), carries at most MaxIndirect bytes into the
// stream buffer, and carries one write in message mode (none for a message
// refused as too long); no other frame follows writes.
func (w *World) checkTransfer(i int, f *dynproto.Frame) {
	p := &w.ep[i]
	c := &w.cfg.Engine[i]
	nw, nb := p.tWrites, p.tBytes
	p.tWrites, p.tBytes = 0, 0
	if f.Type != dynproto.FrameDirect && f.Type != dynproto.FrameIndirect {
		if nw > 0 {
			w.failf("endpoint %c: %d writes followed by %v, not by their transfer's frame", 'A'+i, nw, f.Type)
		}
		return
	}
	gather := c.MaxGather
	if gather == 0 {
		gather = defaultMaxGather
	}
	tooLong := f.Flags&dynproto.FlagTooLong != 0
	switch {
	case int(f.Len) != nb:
		w.failf("endpoint %c: %v announces %d units, its writes carry %d", 'A'+i, f, f.Len, nb)
	case c.Type == dynproto.Stream && nw > gather:
		w.failf("endpoint %c: %v gathers from %d sends, MaxGather is %d", 'A'+i, f, nw, gather)
	case c.Type == dynproto.SeqPacket && f.Type == dynproto.FrameDirect && tooLong && nw != 0:
		w.failf("endpoint %c: %v refuses a message but carries %d writes", 'A'+i, f, nw)
	case c.Type == dynproto.SeqPacket && nw > 1:
		w.failf("endpoint %c: %v carries %d writes of one message", 'A'+i, f, nw)
	case f.Type == dynproto.FrameIndirect && c.MaxIndirect > 0 && nb > c.MaxIndirect:
		w.failf("endpoint %c: %v carries %d units into the stream buffer, MaxIndirect is %d", 'A'+i, f, nb, c.MaxIndirect)
	}
	if nw > 1 {
		w.seen |= SeenGather
	}
}

// applyFrame sends a frame of endpoint i's into the channel to its peer,
// with the writes emitted since the last one.
func (w *World) applyFrame(i int, a dynproto.Action) {
	p := &w.ep[i]
	peer := &w.ep[1-i]
	f := a.Frame
	w.checkTransfer(i, &f)
	switch {
	case f.Type == dynproto.FramePause:
		if p.pauses++; p.pauses > 1 {
			w.seen |= SeenRepeatedPause
		}
	case f.Type == dynproto.FrameAck && f.Msgs > 1:
		w.seen |= SeenBatchedAck
		if f.Flags&dynproto.FlagTooLong != 0 {
			w.seen |= SeenBatchedTooLong
		}
	}
	if w.wrapped(i, &f) {
		w.seen |= SeenWrap
	}
	if w.cfg.Engine[i].Type == dynproto.SeqPacket && f.Flags&dynproto.FlagEOM != 0 &&
		(f.Type == dynproto.FrameDirect || f.Type == dynproto.FrameIndirect) {
		p.unitsSent++ // the message's last transfer (or its refusal)
	}
	if f.Type == dynproto.FrameAdvert {
		f.RKey = uint32(a.ID) + 1 // the world's key for recv a.ID
		f.Addr = 0
		if w.cfg.Forge[1-i] {
			p.adverts = append(p.adverts, sentAdvert{id: f.ID, phase: f.Phase, recv: a.ID})
		}
	}
	if !peer.closed {
		w.ch[1-i] = append(w.ch[1-i], message{frame: f, writes: p.pendingWrite})
	}
	p.pendingWrite = nil
}

// applyCopy checks a copy out of endpoint i's stream buffer and makes it.
func (w *World) applyCopy(i int, a dynproto.Action) {
	p := &w.ep[i]
	if a.ID >= uint64(len(p.recvs)) {
		w.failf("endpoint %c: copy into unknown recv %d", 'A'+i, a.ID)
		return
	}
	r := &p.recvs[a.ID]
	switch {
	case r.done:
		w.failf("endpoint %c: copy into recv %d, already complete", 'A'+i, r.id)
	case r.directed:
		w.failf("endpoint %c: copy from the stream buffer into recv %d, which received a direct write", 'A'+i, r.id)
	case a.Off < 0 || a.Off+a.Len > len(r.data) || a.RingOff < 0 || a.RingOff+a.Len > len(p.ring):
		w.failf("endpoint %c: copy ring [%d:+%d] -> recv %d [%d:+%d] out of bounds", 'A'+i, a.RingOff, a.Len, r.id, a.Off, a.Len)
	}
	if w.err != nil {
		return
	}
	for k := 0; k < a.Len; k++ {
		if !p.ringBusy[a.RingOff+k] {
			w.failf("endpoint %c: copy of stream-buffer byte %d that holds no data", 'A'+i, a.RingOff+k)
			return
		}
		p.ringBusy[a.RingOff+k] = false
		p.busy--
	}
	copy(r.data[a.Off:], p.ring[a.RingOff:a.RingOff+a.Len])
	r.copied = true
}

// applyDiscard frees the stream-buffer bytes of a message dropped as too
// long, checking that they held data.
func (w *World) applyDiscard(i int, a dynproto.Action) {
	p := &w.ep[i]
	for k := a.RingOff; k < a.RingOff+a.Len; k++ {
		if k >= len(p.ring) || !p.ringBusy[k] {
			w.failf("endpoint %c: discard of stream-buffer byte %d that holds no data", 'A'+i, k)
			return
		}
		p.ringBusy[k] = false
		p.busy--
	}
}

// arrived accounts for frame msg (not a disconnect) arriving at endpoint i:
// the units and stream-buffer bytes of its peer's stream it brings, its
// FIN, and the ADVERTs of i's that an indirect transfer overtakes.
func (w *World) arrived(i int, msg *message) {
	p := &w.ep[i]
	f := &msg.frame
	switch f.Type {
	case dynproto.FrameFin:
		p.finIn = true
	case dynproto.FrameDirect, dynproto.FrameIndirect:
		if w.cfg.Engine[i].Type == dynproto.SeqPacket {
			if f.Flags&dynproto.FlagEOM != 0 {
				p.unitsIn++
			}
		} else {
			for _, wr := range msg.writes {
				p.unitsIn += uint64(len(wr.data))
			}
		}
	}
	for _, wr := range msg.writes {
		if wr.kind == dynproto.WriteIndirect {
			p.ringIn = (wr.ringOff + len(wr.data)) % len(p.ring)
		}
	}
	if f.Type == dynproto.FrameIndirect {
		for k := range p.adverts {
			if a := &p.adverts[k]; !p.recvs[a.recv].done && !p.recvs[a.recv].directed {
				a.overtaken = true
			}
		}
	}
}

// place applies the data of writes that arrive at endpoint i.
func (w *World) place(i int, ws []write) {
	p := &w.ep[i]
	for _, wr := range ws {
		if wr.kind == dynproto.WriteIndirect {
			copy(p.ring[wr.ringOff:], wr.data)
		} else {
			copy(p.recvs[wr.recv].data[wr.off:], wr.data)
		}
	}
}
