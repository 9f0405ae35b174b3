package tcp

// Payload I/O: the Payload of a SEND or WRITE handed to Endpoint.Deliver,
// which reads the message's bytes from the socket and checks its FPDUs,
// the Sink of a READ, which queues the response's FPDUs, and the reads
// into a READ's memory.

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// respSink is the Sink of an incoming READ handed to Deliver: it queues the
// RDMA Read Response FPDUs, whose payload is the region's memory itself,
// pinned by a reference of its own until the last byte is written.
type respSink struct {
	l  *link
	rr readRequest
}

func (s *respSink) Write(b []byte) (int, error) {
	l := s.l
	var r *mreg.Region
	if len(b) > 0 {
		var err error
		r, b, err = l.ep.PD().Table().Lookup(mreg.Key(s.rr.srcSTag), s.rr.srcTO, uint64(len(b)), mreg.RemoteRead)
		if err != nil {
			return 0, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term {
		if r != nil {
			r.Release()
		}
		return 0, verbs.ErrClosed
	}
	kind := uint8(itemResp)
	if r == nil {
		kind = itemCtl
	}
	l.pushData(true, opReadResp, s.rr.sinkSTag, s.rr.sinkTO, 0, 0, [][]byte{b}, len(b), kind)
	if r != nil {
		last := l.q[len(l.q)-1]
		last.region, last.respEnd = r, true
		l.respPending++
	}
	// Written once Deliver returned, and with it the reference it took
	// (see onReadRequest).
	return len(b), nil
}

// readInto reads n payload bytes into segs from offset off.
func (l *link) readInto(segs [][]byte, off, n int) error {
	for _, s := range segs {
		if n == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		b := s[off:]
		off = 0
		if len(b) > n {
			b = b[:n]
		}
		if err := l.dec.readFull(b); err != nil {
			return err
		}
		n -= len(b)
	}
	return nil
}

// placed is the Payload of the notification of an RDMA WRITE with
// immediate data: the bytes were placed by the WRITE's segments, so
// reading leaves them as they are.
type placed struct{}

func (placed) Read(p []byte) (int, error) { return len(p), nil }

// payload is the Payload of a SEND or RDMA WRITE segment handed to
// Deliver: it reads the message's bytes from the socket into the memory
// Deliver gives it, checks the CRC of each FPDU before it hands over the
// FPDU's last bytes (so that a RECV never completes with bytes whose CRC
// failed), and follows a SEND into its next segments, checking that each
// continues the message (same MSN, the next message offset).
type payload struct {
	l     *link
	multi bool   // an untagged message, possibly of several segments
	op    uint8  // its opcode
	msn   uint32 // its MSN
	mo    uint32 // offset of the next byte
	ended bool   // the message's last FPDU has been checked
	err   error
}

func (p *payload) reset(h *header, multi bool) {
	*p = payload{l: p.l, multi: multi, op: h.op, msn: h.msn}
}

// begin checks a payload-less FPDU before Deliver sees it.
func (p *payload) begin(h *header) error {
	if h.payload == 0 && (h.last || !p.multi) {
		p.ended = true
		return p.l.dec.end()
	}
	return nil
}

func (p *payload) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	// b is memory of the application's (a RECV's buffer, a WRITE's target
	// region): Terminate waits while it is read into and checked (rxBusy),
	// so that once the queue pair is gone its owner can take the memory
	// back, and nothing is read into it after Terminate.
	l := p.l
	l.mu.Lock()
	if l.term {
		l.mu.Unlock()
		p.err = fmt.Errorf("payload read after Terminate: %w", os.ErrDeadlineExceeded)
		return 0, p.err
	}
	l.rxBusy = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.rxBusy = false
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	d := &l.dec
	for d.left == 0 {
		if p.ended {
			return 0, io.EOF
		}
		if err := p.next(); err != nil {
			p.err = cutShort(err)
			return 0, p.err
		}
	}
	n, err := d.read(b)
	p.mo += uint32(n)
	if err != nil {
		p.err = cutShort(err)
		return 0, p.err
	}
	if d.left == 0 && (d.h.last || !p.multi) && len(b) == n {
		// The last bytes the caller asked for: check the CRC before
		// handing them over.
		if err := d.end(); err != nil {
			p.err = cutShort(err)
			return 0, p.err
		}
		p.ended = true
	}
	return n, nil
}

// cutShort returns the error of a message's payload that could not be
// read: a violation as it is (the peer gets a Terminate), this side's own
// Terminate as it is, and the end or failure of the stream itself as the
// peer's going (verbs.ErrDisconnected, ECONNRESET; ETIMEDOUT kept for a
// silent peer), so that the message, cut short, is never delivered in
// part and the queue pair ends as by the disconnect it is.
func cutShort(err error) error {
	var we *wireError
	if errors.As(err, &we) || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: tcp: the stream ended inside a message (%w)", verbs.ErrDisconnected, err)
}

// next ends the current FPDU and, if the message goes on, reads the next
// one's header.
func (p *payload) next() error {
	d := &p.l.dec
	if err := d.end(); err != nil {
		return err
	}
	if d.h.last || !p.multi {
		p.ended = true
		return nil
	}
	h, err := d.next()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	switch {
	case h.tagged || h.op != p.op:
		return violation(layerRDMAP, etypeRemoteOperation, codeUnexpectedOp, "opcode %d inside a message of opcode %d", h.op, p.op)
	case h.msn != p.msn:
		return violation(layerDDP, etypeUntagged, codeUBadMSN, "MSN %d inside message %d", h.msn, p.msn)
	case !h.moLate && h.mo != p.mo:
		return violation(layerDDP, etypeUntagged, codeUBadMO, "message offset %d, want %d", h.mo, p.mo)
	case uint64(p.mo)+uint64(h.payload) > verbs.MaxMessage:
		return violation(layerDDP, etypeUntagged, codeUTooLong, "message longer than %d bytes", verbs.MaxMessage)
	}
	d.expectMO(p.mo) // a late MO is checked when it is read
	if h.payload == 0 && h.last {
		p.ended = true
		return d.end()
	}
	return nil
}

// finish ends a message Deliver accepted: it reads what Deliver left (a
// message that ended exactly at a RECV's end, say) and checks it.
func (p *payload) finish() error {
	if p.err != nil {
		return p.err
	}
	for !p.ended {
		if err := p.l.dec.discard(); err != nil {
			return err
		}
		if err := p.next(); err != nil {
			return err
		}
	}
	return nil
}
