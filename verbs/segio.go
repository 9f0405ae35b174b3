package verbs

import "io"

// segReader reads a list of byte slices in order: the gather list of a
// work request. It is thread-compatible: one reader at a time.
type segReader struct {
	segs [][]byte
	i    int // current segment
	off  int // offset in segs[i]
}

// reset rewinds r over segs.
func (r *segReader) reset(segs [][]byte) { r.segs, r.i, r.off = segs, 0, 0 }

// Read copies the next bytes into p. It returns io.EOF once every segment
// has been read.
func (r *segReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i < len(r.segs) {
		c := copy(p[n:], r.segs[r.i][r.off:])
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
}

// reset rewinds w over segs.
func (w *segWriter) reset(segs [][]byte) { w.segs, w.i, w.off = segs, 0, 0 }

// Write copies p into the next bytes of the segments. It returns
// io.ErrShortWrite if p does not fit.
func (w *segWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) && w.i < len(w.segs) {
		c := copy(w.segs[w.i][w.off:], p[n:])
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
