package dynproto_test

import (
	"testing"

	"github.com/exsgo/exs/dynproto"
)

// pair is a sender S and a receiver R with their two channels held by the
// test, so that it can delay frames (each channel stays FIFO).
type pair struct {
	t    *testing.T
	S, R *dynproto.Engine
	data []dynproto.Frame // S -> R
	ctl  []dynproto.Frame // R -> S
	// Actions each side emitted at its last input.
	sOut, rOut []dynproto.Action
	writes     int    // writes S emitted and not yet reported done
	sendsDone  int    // SendDone actions S emitted so far
	recvsDone  int    // RecvDone actions R emitted so far
	nextRecv   uint64 // one more than the highest recv id posted
}

func newPair(t *testing.T, cfg dynproto.Config) *pair {
	t.Helper()
	s, err := dynproto.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := dynproto.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &pair{t: t, S: s, R: r}
}

func (p *pair) fromS(acts []dynproto.Action) {
	p.sOut = append(p.sOut[:0], acts...)
	for _, a := range acts {
		switch a.Kind {
		case dynproto.SendFrame:
			p.data = append(p.data, a.Frame)
		case dynproto.WriteDirect, dynproto.WriteIndirect:
			p.writes++
		case dynproto.SendDone:
			p.sendsDone++
		}
	}
}

func (p *pair) fromR(acts []dynproto.Action) {
	p.rOut = append(p.rOut[:0], acts...)
	for _, a := range acts {
		if a.Kind == dynproto.RecvDone {
			p.recvsDone++
		}
		if a.Kind == dynproto.SendFrame {
			f := a.Frame
			if f.Type == dynproto.FrameAdvert {
				f.RKey = uint32(a.ID) + 100 // recv id + 100, recognisable in WriteDirect
			}
			p.ctl = append(p.ctl, f)
		}
	}
}

func (p *pair) send(id uint64, n int) { p.fromS(p.S.PostSend(nil, id, n)) }
func (p *pair) recv(id uint64, n int, waitAll bool) {
	p.nextRecv = max(p.nextRecv, id+1)
	p.fromR(p.R.PostRecv(nil, id, n, waitAll))
}

func (p *pair) doneWrites() {
	p.t.Helper()
	for ; p.writes > 0; p.writes-- {
		acts, err := p.S.WriteDone(nil)
		if err != nil {
			p.t.Fatal(err)
		}
		p.fromS(acts)
	}
}

// deliverCtlFrames hands the first n control frames to S.
func (p *pair) deliverCtlFrames(n int) {
	p.t.Helper()
	for range n {
		f := p.ctl[0]
		p.ctl = p.ctl[1:]
		acts, err := p.S.OnFrame(nil, &f)
		if err != nil {
			p.t.Fatalf("S rejected %v: %v", f, err)
		}
		p.fromS(acts)
	}
}

// deliverDataFrames hands the first n data frames to R, copying out after
// each; it returns R's first protocol error.
func (p *pair) deliverDataFrames(n int) error {
	for range n {
		f := p.data[0]
		p.data = p.data[1:]
		acts, err := p.R.OnFrame(nil, &f)
		if err != nil {
			return err
		}
		p.fromR(p.R.Copy(acts))
	}
	return nil
}

func (p *pair) deliverAll() error {
	for len(p.ctl) > 0 || len(p.data) > 0 || p.writes > 0 {
		p.doneWrites()
		p.deliverCtlFrames(len(p.ctl))
		if err := p.deliverDataFrames(len(p.data)); err != nil {
			return err
		}
	}
	return nil
}
