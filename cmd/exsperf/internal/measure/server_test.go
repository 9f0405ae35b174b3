package measure

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/dynproto"
	"go.uber.org/zap"
)

func TestParseTCPAddr(t *testing.T) {
	for _, c := range []struct {
		in     string
		listen bool
		want   string // the host, or a part of the error
	}{
		{"tcp:example.org:80", false, "example.org:80"},
		{"example.org:80", false, "example.org:80"},
		{"example.org", false, "example.org:5201"},
		{"tcp::5201", true, ":5201"},
		{"[::1]:9", false, "[::1]:9"},
		{"example.org", true, "bad address"},
		{"a:b:c", false, "bad address"},
		{"inproc:x", false, "cannot reach another process"},
		{"exs+inproc:x", false, "cannot reach another process"},
		{"exs+iwarp:x", false, "no such exs provider"},
		{"shm:x", false, "no such exs provider"},
	} {
		a, err := ParseTCPAddr(c.in, c.listen)
		got := a.Host
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("ParseTCPAddr(%q, %v) = %q, want %q", c.in, c.listen, got, c.want)
		}
	}
	for in, want := range map[string]string{"shm:/tmp/x": "shm:/tmp/x", "exs+shm:/tmp/x": "shm:/tmp/x", "shm:": "", "tcp:x:1": ""} {
		if got, ok := ExsAddr(in); got != want || ok != (want != "") {
			t.Errorf("ExsAddr(%q) = %q, %v", in, got, ok)
		}
	}
}

// TestExsRequestParams: the server refuses a request it cannot serve,
// before it opens anything for it.
func TestExsRequestParams(t *testing.T) {
	ok := exsRequest{request: request{Test: "stream", Size: 4096, Wait: "busy"}, Mode: "dynamic", Sends: 4, Recvs: 8, Ring: 1 << 20}
	p, w, err := ok.params()
	if err != nil || w != WaitBusy || p != (Params{Mode: dynproto.Dynamic, Size: 4096, Sends: 4, Recvs: 8, Ring: 1 << 20, Wait: WaitBusy}) {
		t.Errorf("%+v: %+v, %v, %v", ok, p, w, err)
	}
	ok.Wait = ""
	if _, w, err := ok.params(); err != nil || w != WaitAdaptive {
		t.Errorf("no wait mode: %v, %v; want adaptive", w, err)
	}
	for _, c := range []struct {
		edit func(r *exsRequest)
		want string
	}{
		{func(r *exsRequest) { r.Mode = "direct-only,dynamic" }, "bad mode"},
		{func(r *exsRequest) { r.Test = "ping" }, "unknown test"},
		{func(r *exsRequest) { r.Size = 0 }, "bad size"},
		{func(r *exsRequest) { r.Size = 64<<20 + 1 }, "bad size"},
		{func(r *exsRequest) { r.Sends = 4097 }, "bad size"},
		{func(r *exsRequest) { r.Recvs = 0 }, "bad size"},
		{func(r *exsRequest) { r.Size, r.Sends, r.Recvs = 64<<20, 64, 64 }, "bad size"},
		{func(r *exsRequest) { r.Ring = 0 }, "bad size"},
		{func(r *exsRequest) { r.Wait = "busy,block" }, "bad wait mode"},
	} {
		r := ok
		c.edit(&r)
		if _, _, err := r.params(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", r, err, c.want)
		}
	}
}

// TestServers measures against a TCP server and an exs server of this
// process: a stream with every byte checked and a ping-pong each, and, over
// exs, what the provider said of how it moved the bytes.
func TestServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Run("tcp", func(t *testing.T) {
		s, err := ListenTCP(ctx, TCPAddr{Host: "127.0.0.1:0"}, "", zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ParseTCPAddr(s.Addr(), false)
		if err != nil {
			t.Fatal(err)
		}
		serve(t, ctx, s, NewTCPClient(a), Params{Size: 3000, Sends: 4, Recvs: 1, Verify: true, Seed: 3}, WaitBlock)
	})
	t.Run("exs", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("the same-host provider needs Linux")
		}
		dir, err := os.MkdirTemp("", "exsperf")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		addr := "shm:" + filepath.Join(dir, "s")
		s, err := ListenExs(addr, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if s.Addr() != addr {
			t.Errorf("Addr() = %q, want %q", s.Addr(), addr)
		}
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, true) }() // owner: this test, which takes done
		c, err := DialExs(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		p := Params{Mode: dynproto.DirectOnly, Size: 3000, Sends: 4, Recvs: 8, Ring: 64 << 10, Verify: true, Seed: 3}
		r, err := Measure(ctx, Point{Run: "direct-only", Tr: c, Params: p}, 2*time.Millisecond, 10*time.Millisecond)
		if err != nil || !(r.Bytes > 0) || r.PctDirect() != 100 || r.CPURecv < 0 {
			t.Errorf("stream: %+v, %v", r, err)
		}
		p.Wait = WaitBlock
		if rts, err := PingPong(ctx, c, p, WaitBlock, time.Millisecond, 5*time.Millisecond); err != nil || len(rts) == 0 {
			t.Errorf("ping-pong: %d round trips, %v", len(rts), err)
		}
		if !strings.Contains(c.CMANote(), "cross-memory attach") {
			t.Errorf("no word on cross-memory attach: %q", c.CMANote())
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// serve serves s for one stream and one ping-pong of the client transport
// c, and checks both.
func serve(t *testing.T, ctx context.Context, s *TCPServer, c Transport, p Params, w WaitMode) {
	t.Helper()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx, false) }() // owner: serve, which takes done
	r, err := Measure(ctx, Point{Run: "TCP", Tr: c, Params: p}, 2*time.Millisecond, 10*time.Millisecond)
	if err != nil || !(r.Bytes > 0) || r.CPURecv < 0 && CPUAccounting != "unavailable on this platform" {
		t.Errorf("stream: %+v, %v", r, err)
	}
	if rts, err := PingPong(ctx, c, p, w, time.Millisecond, 5*time.Millisecond); err != nil || len(rts) == 0 {
		t.Errorf("ping-pong: %d round trips, %v", len(rts), err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
