package verbs

import (
	"io"

	"github.com/exsgo/exs/internal/bigcopy"
)

// segReader reads a list of byte slices in order: the gather list of a
// work request. It is thread-compatible: one reader at a time.
type segReader struct {
	segs [][]byte
	i    int // current segment
	off  int // offset in segs[i]
	big  bool
}

// reset rewinds r over segs.
func (r *segReader) reset(segs [][]byte) {
	r.segs, r.i, r.off, r.big = segs, 0, 0, isBig(segs)
}

// isBig reports whether segs hold bigcopy.Min bytes or more: a transfer
// that runtime.memmove, were it one block, would copy with non-temporal
// stores; its pieces are then copied so too (bigcopy.Copy), and smaller
// transfers through the cache (copy()).
func isBig(segs [][]byte) bool {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n >= bigcopy.Min
}

// copyPiece copies src into dst with bigcopy.Copy if big, else copy().
func copyPiece(dst, src []byte, big bool) int {
	if big {
		return bigcopy.Copy(dst, src)
	}
	return copy(dst, src)
}

// Read copies the next bytes into p. It returns io.EOF once every segment
// has been read.
func (r *segReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i < len(r.segs) {
		c := copyPiece(p[n:], r.segs[r.i][r.off:], r.big)
		n += c
		r.off += c
		if r.off == len(r.segs[r.i]) {
			r.i++
			r.off = 0
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo writes the remaining bytes to w, one Write per segment.
func (r *segReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for r.i < len(r.segs) {
		b := r.segs[r.i][r.off:]
		r.i++
		r.off = 0
		if len(b) == 0 {
			continue
		}
		n, err := w.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// segWriter writes into a list of byte slices in order: the scatter list
// of an RDMA READ. It is thread-compatible.
type segWriter struct {
	segs [][]byte
	i    int
	off  int
	big  bool
}

// reset rewinds w over segs.
func (w *segWriter) reset(segs [][]byte) {
	w.segs, w.i, w.off, w.big = segs, 0, 0, isBig(segs)
}

// Write copies p into the next bytes of the segments. It returns
// io.ErrShortWrite if p does not fit.
func (w *segWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) && w.i < len(w.segs) {
		c := copyPiece(w.segs[w.i][w.off:], p[n:], w.big)
		n += c
		w.off += c
		if w.off == len(w.segs[w.i]) {
			w.i++
			w.off = 0
		}
	}
	if n < len(p) {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// readInto fills the segments segs, in order, with exactly n bytes from r
// (n <= their total length).
func readInto(r io.Reader, segs [][]byte, n int) error {
	for _, s := range segs {
		if n == 0 {
			break
		}
		k := min(len(s), n)
		if _, err := io.ReadFull(r, s[:k]); err != nil {
			return err
		}
		n -= k
	}
	if n > 0 {
		return io.ErrUnexpectedEOF
	}
	return nil
}
