package exsnet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/exsgo/exs/exs/exsnet"
)

// echoHandler answers every request with its body.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/1 handlers read the body before they answer.
		body, err := readAll(r.Body, r.ContentLength)
		defer putBuf(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body.Bytes())
	})
}

// serveHTTP serves echoHandler at addr until the end of the test.
func serveHTTP(t *testing.T, addr string) {
	ln := listen(t, addr)
	srv := &http.Server{Handler: echoHandler()}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
}

// childHTTP serves echoHandler at addr in a child process.
func childHTTP(addr string) error {
	return serveUntilStdinCloses(addr, func(ln *exsnet.Listener) error {
		srv := &http.Server{Handler: echoHandler()}
		err := srv.Serve(ln)
		srv.Close()
		if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
}

// httpClient returns a client whose connections are exs connections to
// addr, closed at the end of the test.
func httpClient(t *testing.T, addr string, opts ...exsnet.Option) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := exsnet.Dial(ctx, addr, opts...)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 8,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// bodySizes returns n sizes from 0 to 8 MiB: the ends, and between them
// sizes spread evenly over the orders of magnitude.
func bodySizes(n int, rng *rand.Rand) []int {
	const most = 8 << 20
	sizes := []int{0, 1, most, 64 << 10, 1 << 20}
	for len(sizes) < n {
		sizes = append(sizes, int(most*math.Exp2(-23*rng.Float64())))
	}
	return sizes
}

// exchange posts 100 requests with bodies of 0 B to 8 MiB to an echo
// server at addr, four at a time, and checks every answer byte for byte.
func exchange(t *testing.T, addr string) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 14))
	sizes := bodySizes(100, rng)
	pool := randomBytes(t, 8<<20+4096)
	client := httpClient(t, addr)
	work := make(chan int)
	var wg sync.WaitGroup
	var total int64
	var mu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				off := (i * 4099) % 4096
				body := pool[off : off+sizes[i]]
				if err := post(client, body); err != nil {
					t.Errorf("request %d (%d bytes): %v", i, len(body), err)
					continue
				}
				mu.Lock()
				total += int64(len(body))
				mu.Unlock()
			}
		}()
	}
	for i := range sizes {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d requests, %d body bytes each way", len(sizes), total)
}

func post(client *http.Client, body []byte) error {
	resp, err := client.Post("http://exs/echo", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf, err := readAll(resp.Body, resp.ContentLength)
	defer putBuf(buf)
	got := buf.Bytes()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s: %s", resp.Status, got)
	}
	if !bytes.Equal(got, body) {
		return fmt.Errorf("echo of %d bytes differs: %d bytes, first difference at %d", len(body), len(got), firstDiff(got, body))
	}
	return nil
}

// bufs holds the buffers readAll reads bodies into: reused, so that the
// test does not make (and the race detector shadow) fresh megabytes per
// request. Unlike a sync.Pool's, they survive garbage collections.
var bufs = make(chan *bytes.Buffer, 16)

func getBuf() *bytes.Buffer {
	select {
	case b := <-bufs:
		return b
	default:
		return new(bytes.Buffer)
	}
}

func putBuf(b *bytes.Buffer) {
	select {
	case bufs <- b:
	default:
	}
}

// readAll reads r to its end into a buffer from bufs with room for n
// bytes (its length, if known). Put the buffer back when done with it.
func readAll(r io.Reader, n int64) (*bytes.Buffer, error) {
	b := getBuf()
	b.Reset()
	if n > 0 {
		b.Grow(int(n) + bytes.MinRead)
	}
	_, err := b.ReadFrom(r)
	return b, err
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// randomBytes returns n random bytes.
func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	seed := rand.Uint64()
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	rng.Read(b)
	return b
}

func TestHTTP(t *testing.T) {
	t.Run("inproc", func(t *testing.T) {
		addr := inprocAddr(t)
		serveHTTP(t, addr)
		exchange(t, addr)
	})
	t.Run("shm", func(t *testing.T) {
		addr := shmAddr(t)
		serveHTTP(t, addr)
		exchange(t, addr)
	})
	t.Run("process", func(t *testing.T) {
		addr := shmAddr(t)
		startChild(t, "http", addr)
		exchange(t, addr)
	})
}
