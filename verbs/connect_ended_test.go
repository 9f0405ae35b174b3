package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/inproc"
)

// TestConnectPeerEndedDuringSetUp: the peer accepts, sends a message and
// disconnects before the provider's Dial has returned to Connect. Connect
// succeeds, as it would have a moment earlier, with the queue pair in
// Error: the message arrived in the first RECV, the second is flushed.
// (Connect used to fail with ErrQPState, and the message, whose send had
// completed at the peer, was lost with it.)
func TestConnectPeerEndedDuringSetUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	p := &wrapProvider{inner: inproc.New(), wrap: func(l verbs.Link, _ *verbs.Endpoint) verbs.Link { return l }}
	dialWrap := func(l verbs.Link, _ *verbs.Endpoint) verbs.Link { <-release; return l }
	dev, err := verbs.Open(&dialHook{wrapProvider: p, wrap: dialWrap})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	ccq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	scq, _ := dev.CreateCQ(16, verbs.CQOptions{})
	client, err := pd.CreateQP(verbs.QPConfig{SendCQ: ccq, RecvCQ: ccq})
	if err != nil {
		t.Fatal(err)
	}
	server, err := pd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 32)
	dmr, _ := pd.RegisterMR(dst, mreg.LocalWrite)
	for i := range 2 {
		if err := client.PostRecv(verbs.RecvWR{WRID: uint64(10 + i), SGL: []verbs.SGE{dmr.SGE(16*i, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := dev.Listen("inproc:ended-during-set-up")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, err := client.Connect(ctx, "inproc:ended-during-set-up", nil)
		done <- result{err}
	}()
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Accept(server, nil); err != nil {
		t.Fatal(err)
	}
	src := []byte("hello")
	smr, _ := pd.RegisterMR(src, 0)
	if err := server.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{smr.SGE(0, len(src))}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	if _, err := scq.Wait(ctx, wcs, 1); err != nil || wcs[0].Status != verbs.StatusSuccess {
		t.Fatalf("the peer's send: %+v, %v", wcs[0], err)
	}
	if err := server.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for client.State() != verbs.StateError {
		if ctx.Err() != nil {
			t.Fatal("the client's queue pair never saw the disconnect")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if r := <-done; r.err != nil {
		t.Fatalf("Connect: %v, want success (the peer accepted)", r.err)
	}
	type wc struct {
		WRID   uint64
		Status verbs.Status
		Len    uint32
	}
	var got []wc
	for len(got) < 2 {
		if _, err := ccq.Wait(ctx, wcs, 1); err != nil {
			t.Fatalf("client completions %v: %v", got, err)
		}
		got = append(got, wc{wcs[0].WRID, wcs[0].Status, wcs[0].ByteLen})
	}
	want := []wc{{10, verbs.StatusSuccess, 5}, {11, verbs.StatusFlushed, 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("client completions (-want +got):\n%s", d)
	}
	if string(dst[:5]) != "hello" {
		t.Errorf("received %q, want hello", dst[:5])
	}
}

// dialHook is a provider whose dialed links are wrapped by wrap, inside
// Dial, before it returns.
type dialHook struct {
	*wrapProvider
	wrap func(l verbs.Link, ep *verbs.Endpoint) verbs.Link
}

func (p *dialHook) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	l, rep, err := p.inner.Dial(ctx, addr, ep, private)
	if err != nil {
		return nil, nil, err
	}
	return p.wrap(l, ep), rep, nil
}
