//go:build linux

package exs_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/exsgo/exs/exs"
)

// tempFile writes n random bytes (seeded by seed) to a new file of the
// test and returns it open for reading, with its contents.
func tempFile(t testing.TB, n int, seed uint64) (*os.File, []byte) {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, data
}

// recvAll posts recvs of 64 KiB on s until want bytes have arrived and
// returns them.
func recvAll(t testing.TB, s *exs.Socket, q *exs.Queue, want int) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for len(got) < want {
		if err := s.Recv(q, buf[:min(len(buf), want-len(got))], nil, 0, "recv"); err != nil {
			t.Fatal(err)
		}
		ev := waitType(t, q, exs.EventRecv, "recv")
		if ev.Err != nil {
			t.Fatalf("recv after %d of %d bytes: %v", len(got), want, ev.Err)
		}
		got = append(got, buf[:ev.N]...)
	}
	return got
}

// TestSendfile sends ranges of a file between a send before and a send
// after, and checks what the peer gets: the sends are not interleaved with
// the file's bytes, N tells a range cut short by the end of the file.
func TestSendfile(t *testing.T) {
	const size = 1<<20 + 300_001 // several chunks, not a whole number of them
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	tests := []struct {
		name   string
		offset int64
		count  int
		wantN  int
		from   int // of the file's bytes sent
	}{
		{"whole", 0, size, size, 0},
		{"middle", 1000, 700_000, 700_000, 1000},
		{"one byte", size - 1, 1, 1, size - 1},
		{"count 0", 10, 0, 0, 10},
		{"count beyond the end", size - 5000, 10_000, 5000, size - 5000},
		{"offset at the end", size, 100, 0, size},
		{"offset beyond the end", size + 1<<20, 100, 0, size},
	}
	for _, pv := range providers {
		for _, mode := range []exs.Mode{exs.ModeDynamic, exs.ModeIndirectOnly, exs.ModeDirectOnly} {
			t.Run(pv.name+"/"+mode.String(), func(t *testing.T) {
				st := newStack(t)
				f, data := tempFile(t, size, seed)
				p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(mode))
				qc := newQueue(t, st, 16) // the client's events
				for _, tt := range tests {
					if err := p.client.Send(qc, []byte("<"), nil, 0, "before"); err != nil {
						t.Fatal(err)
					}
					if err := p.client.Sendfile(qc, f, tt.offset, tt.count, 0, "sendfile"); err != nil {
						t.Fatalf("%s: %v", tt.name, err)
					}
					if err := p.client.Send(qc, []byte(">"), nil, 0, "after"); err != nil {
						t.Fatal(err)
					}
					got := recvAll(t, p.server, p.q, tt.wantN+2)
					want := append(append([]byte("<"), data[tt.from:tt.from+tt.wantN]...), '>')
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: the peer got %d bytes, not the %d expected (first difference at %d)", tt.name, len(got), len(want), firstDiff(got, want))
					}
					var evs []brief
					for range 3 {
						evs = append(evs, briefOf(wait(t, qc)))
					}
					wantEvs := []brief{
						{Type: exs.EventSend, User: "before", N: 1},
						{Type: exs.EventSend, User: "sendfile", N: tt.wantN},
						{Type: exs.EventSend, User: "after", N: 1},
					}
					if d := cmp.Diff(wantEvs, evs); d != "" {
						t.Fatalf("%s: events (-want +got):\n%s", tt.name, d)
					}
				}
				// The file's offset did not move.
				if off, _ := f.Seek(0, 1); off != 0 {
					t.Errorf("file offset %d after the sendfiles, want 0", off)
				}
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSendfileTruncated closes and truncates the file under a pending
// sendfile: the sendfile sends what the file holds, N tells it, and
// nothing faults.
func TestSendfileTruncated(t *testing.T) {
	const size, cut = 4 << 20, 3<<19 + 7
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			f, data := tempFile(t, size, 1)
			// Direct-only, no recv posted: the sendfile waits for the
			// peer after reading its first chunks (1 MiB), before the
			// cut.
			p := connectAddr(t, st, exs.SockStream, pv.addr(t), exs.WithMode(exs.ModeDirectOnly))
			qc := newQueue(t, st, 16) // the client's events
			if err := p.client.Sendfile(qc, f, 0, size, 0, "sendfile"); err != nil {
				t.Fatal(err)
			}
			noEvent(t, qc)
			path := f.Name()
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, cut); err != nil {
				t.Fatal(err)
			}
			got := recvAll(t, p.server, p.q, cut)
			if !bytes.Equal(got, data[:cut]) {
				t.Fatalf("the peer got %d bytes, first difference at %d", len(got), firstDiff(got, data[:cut]))
			}
			if ev := waitType(t, qc, exs.EventSend, "sendfile"); ev.Err != nil || ev.N != cut {
				t.Fatalf("sendfile: N %d, %v; want %d", ev.N, ev.Err, cut)
			}
			// Nothing more comes: the stream goes on with the next send.
			p.client.Send(qc, []byte("next"), nil, 0, "send")
			if got := recvAll(t, p.server, p.q, 4); string(got) != "next" {
				t.Fatalf("after the sendfile the peer got %q", got)
			}
			waitType(t, qc, exs.EventSend, "send")
		})
	}
}

func TestSendfileBadInput(t *testing.T) {
	st := newStack(t)
	p := connectAddr(t, st, exs.SockStream, testAddr(t))
	f, _ := tempFile(t, 10, 1)
	closed, _ := tempFile(t, 10, 1)
	closed.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	wronly, err := os.OpenFile(filepath.Join(t.TempDir(), "w"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer wronly.Close()
	unconnected, _ := st.Socket(exs.SockStream)
	tests := []struct {
		name   string
		s      *exs.Socket
		q      *exs.Queue
		f      *os.File
		offset int64
		count  int
		flags  exs.Flags
		want   error
	}{
		{"nil queue", p.client, nil, f, 0, 1, 0, exs.ErrInvalid},
		{"nil file", p.client, p.q, nil, 0, 1, 0, exs.ErrInvalid},
		{"negative offset", p.client, p.q, f, -1, 1, 0, exs.ErrInvalid},
		{"negative count", p.client, p.q, f, 0, -1, 0, exs.ErrInvalid},
		{"flags", p.client, p.q, f, 0, 1, exs.MsgWaitAll, exs.ErrInvalid},
		{"closed file", p.client, p.q, closed, 0, 1, 0, exs.ErrInvalid},
		{"pipe", p.client, p.q, pr, 0, 1, 0, exs.ErrInvalid},
		{"directory", p.client, p.q, dir, 0, 1, 0, exs.ErrInvalid},
		{"not open for reading", p.client, p.q, wronly, 0, 1, 0, exs.ErrInvalid},
		{"unconnected socket", unconnected, p.q, f, 0, 1, 0, exs.ErrNotConnected},
	}
	for _, tt := range tests {
		err := tt.s.Sendfile(tt.q, tt.f, tt.offset, tt.count, tt.flags, "sendfile")
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Sendfile = %v, want %v", tt.name, err, tt.want)
		}
	}
	if !errors.Is(exs.ErrInvalid, syscall.EINVAL) {
		t.Error("ErrInvalid does not match EINVAL")
	}
	noEvent(t, p.q)
	if got := p.q.Outstanding(); got != 0 {
		t.Errorf("Outstanding after refused sendfiles = %d, want 0", got)
	}
}

// TestSendfileSeqPacket sends a file range as one message.
func TestSendfileSeqPacket(t *testing.T) {
	const size = 100_000
	for _, pv := range providers {
		t.Run(pv.name, func(t *testing.T) {
			st := newStack(t)
			f, data := tempFile(t, size, 2)
			p := connectAddr(t, st, exs.SockSeqPacket, pv.addr(t))
			buf := make([]byte, 128<<10)
			tests := []struct {
				name         string
				offset       int64
				count, wantN int
				recvLen      int
				wantErr      syscall.Errno
			}{
				{"whole", 0, size, size, len(buf), 0},
				{"beyond the end", 60_000, 100_000, 40_000, len(buf), 0},
				{"empty", size, 10, 0, len(buf), 0},
				{"longer than the recv", 0, size, 0, 1000, syscall.EMSGSIZE},
			}
			for _, tt := range tests {
				if err := p.server.Recv(p.q, buf[:tt.recvLen], nil, 0, "recv"); err != nil {
					t.Fatal(err)
				}
				if err := p.client.Sendfile(p.q, f, tt.offset, tt.count, 0, "sendfile"); err != nil {
					t.Fatal(err)
				}
				evs := map[any]exs.Event{}
				for range 2 {
					ev := wait(t, p.q)
					evs[ev.User] = ev
				}
				rv, sf := evs["recv"], evs["sendfile"]
				if tt.wantErr != 0 {
					if !errors.Is(rv.Err, tt.wantErr) || !errors.Is(sf.Err, tt.wantErr) {
						t.Fatalf("%s: recv %v, sendfile %v; want %v", tt.name, rv.Err, sf.Err, tt.wantErr)
					}
					continue
				}
				if rv.Err != nil || sf.Err != nil || sf.N != tt.wantN || rv.N != tt.wantN {
					t.Fatalf("%s: recv N %d %v, sendfile N %d %v; want %d", tt.name, rv.N, rv.Err, sf.N, sf.Err, tt.wantN)
				}
				if !bytes.Equal(buf[:rv.N], data[tt.offset:int(tt.offset)+tt.wantN]) {
					t.Fatalf("%s: message differs", tt.name)
				}
			}
		})
	}
}

// TestSendfileReadError: a read that fails ends the sendfile with its
// errno, and the stream goes on. /proc/self/mem is a regular file whose
// pread at address 0 (never mapped) fails with EIO.
func TestSendfileReadError(t *testing.T) {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Skip(err)
	}
	defer mem.Close()
	if _, err := mem.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EIO) {
		t.Skipf("pread of /proc/self/mem at 0: %v, not EIO", err)
	}
	for _, pv := range providers {
		for _, typ := range []exs.SockType{exs.SockStream, exs.SockSeqPacket} {
			t.Run(pv.name+"/"+typ.String(), func(t *testing.T) {
				st := newStack(t)
				p := connectAddr(t, st, typ, pv.addr(t))
				qc := newQueue(t, st, 16)
				bufs := [][]byte{make([]byte, 8), make([]byte, 8)}
				for i, b := range bufs {
					p.server.Recv(p.q, b, nil, 0, i)
				}
				p.client.Send(qc, []byte("a"), nil, 0, "before")
				if err := p.client.Sendfile(qc, mem, 0, 100, 0, "sendfile"); err != nil {
					t.Fatal(err)
				}
				p.client.Send(qc, []byte("b"), nil, 0, "after")
				evs := []exs.Event{wait(t, qc), wait(t, qc), wait(t, qc)}
				if !errors.Is(evs[1].Err, syscall.EIO) {
					t.Fatalf("sendfile: %v, want EIO", evs[1].Err)
				}
				got := []brief{briefOf(evs[0]), briefOf(evs[1]), briefOf(evs[2])}
				want := []brief{
					{Type: exs.EventSend, User: "before", N: 1},
					{Type: exs.EventSend, User: "sendfile", Err: syscall.EIO},
					{Type: exs.EventSend, User: "after", N: 1},
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Fatalf("events (-want +got):\n%s", d)
				}
				// The stream goes on: the peer gets the two sends (in one
				// recv or two on a stream).
				var got2 []byte
				for i := 0; len(got2) < 2; i++ {
					ev := waitType(t, p.q, exs.EventRecv, i)
					got2 = append(got2, bufs[i][:ev.N]...)
				}
				if string(got2) != "ab" {
					t.Fatalf("the peer got %q, want ab", got2)
				}
			})
		}
	}
}
