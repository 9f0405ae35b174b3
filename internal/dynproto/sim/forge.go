package sim

import (
	"errors"
	"fmt"

	"github.com/exsgo/exs/dynproto"
)

// CheckForgeries checks every endpoint whose peer is an adversary
// (Config.Forge) against the wrong frames the peer could send next, in
// place of the frame at the head of the channel: that frame with its
// sequence number, phase, stream-buffer offset or ADVERT number off by one
// either way; a DIRECT transfer, at the right sequence number, into an
// ADVERT of the victim's that is stale (an indirect transfer overtook it)
// or whose recv was filled from the stream buffer or completed (a replayed
// ADVERT); and an INDIRECT transfer, at the right sequence number and
// offset, one byte longer than the stream buffer's free space. A copy of
// the victim's engine takes each in turn: it must refuse it with an error
// matching dynproto.ErrProtocol and emit no action (the caller aborts the
// connection, carrying out what the engine returned: nothing may be copied
// or completed). The frames are well-formed and carry the head frame's
// frame credits, so that flow control does not refuse them first.
func (w *World) CheckForgeries() error {
	if w.err != nil {
		return nil
	}
	for adv := range 2 {
		v := 1 - adv
		if !w.cfg.Forge[adv] || w.ep[v].closed || w.ep[adv].closed || len(w.ch[v]) == 0 || w.ch[v][0].gone {
			continue
		}
		for _, f := range w.forgeries(v) {
			if err := w.refuses(v, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgeries returns the wrong frames endpoint v's peer could send in place
// of the head frame of v's channel.
func (w *World) forgeries(v int) []dynproto.Frame {
	p := &w.ep[v]
	c := &w.cfg.Engine[v]
	head := w.ch[v][0].frame
	var fs []dynproto.Frame
	off := func(edit func(f *dynproto.Frame, d int)) {
		for _, d := range []int{-1, 1} {
			f := head
			edit(&f, d)
			fs = append(fs, f)
		}
	}
	seq := func(f *dynproto.Frame, d int) { f.Seq += dynproto.Seq(d) }
	phase := func(f *dynproto.Frame, d int) { f.Phase += dynproto.Phase(d) }
	switch head.Type {
	case dynproto.FrameDirect:
		off(seq)
		off(phase)
		off(func(f *dynproto.Frame, d int) { f.ID += uint32(d) })
	case dynproto.FrameIndirect:
		off(seq)
		off(phase)
		off(func(f *dynproto.Frame, d int) { f.RingOff += uint32(d) })
	case dynproto.FrameFin, dynproto.FramePause:
		off(seq)
	}
	// What a transfer sent now must carry: the next unit of the stream,
	// the next stream-buffer offset.
	next := c.PeerInitialSeq + dynproto.Seq(p.unitsIn)
	keep := head.Flags & (dynproto.FlagSlot | dynproto.FlagHeld)
	for _, a := range p.adverts {
		r := &p.recvs[a.recv]
		if !a.overtaken && !r.done && !r.copied {
			continue // still a recv the peer may fill directly
		}
		f := dynproto.Frame{Type: dynproto.FrameDirect, Flags: keep, Credits: head.Credits, Phase: a.phase, Seq: next, ID: a.id, Len: 1}
		if c.Type == dynproto.SeqPacket {
			f.Flags |= dynproto.FlagEOM
		}
		fs = append(fs, f)
	}
	data := p.busy // stream-buffer bytes holding data or reserved by writes in flight
	for _, m := range w.ch[v] {
		for _, wr := range m.writes {
			if wr.kind == dynproto.WriteIndirect {
				data -= len(wr.data)
			}
		}
	}
	for _, wr := range w.ep[1-v].pendingWrite {
		if wr.kind == dynproto.WriteIndirect {
			data -= len(wr.data)
		}
	}
	f := dynproto.Frame{Type: dynproto.FrameIndirect, Flags: keep, Credits: head.Credits, Phase: c.PeerInitialPhase, Seq: next,
		RingOff: uint32(p.ringIn), Len: uint32(len(p.ring) - data + 1)}
	if c.Type == dynproto.SeqPacket {
		f.Flags |= dynproto.FlagEOM
	}
	return append(fs, f)
}

// refuses checks that endpoint v's engine refuses frame f (on a copy).
func (w *World) refuses(v int, f dynproto.Frame) error {
	e := engineOps.Clone(w.ep[v].eng)
	acts, err := e.OnFrame(nil, &f)
	switch {
	case err == nil:
		return fmt.Errorf("endpoint %c accepted a forged frame %v in place of %v (actions %v)", 'A'+v, f, w.ch[v][0].frame, acts)
	case !errors.Is(err, dynproto.ErrProtocol):
		return fmt.Errorf("endpoint %c refused a forged frame %v with %v, not a protocol error", 'A'+v, f, err)
	case len(acts) > 0:
		return fmt.Errorf("endpoint %c refused a forged frame %v (%v) but asked for %v", 'A'+v, f, err, acts)
	}
	return nil
}
