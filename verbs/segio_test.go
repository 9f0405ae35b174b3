package verbs

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/exsgo/exs/internal/bigcopy"

	"github.com/google/go-cmp/cmp"
)

func TestSegReader(t *testing.T) {
	tests := []struct {
		name string
		segs [][]byte
		read []int // sizes of successive Read calls
		want []string
	}{
		{"empty", nil, []int{4}, []string{""}},
		{"one", [][]byte{[]byte("abcdef")}, []int{4, 4, 4}, []string{"abcd", "ef", ""}},
		{"across", [][]byte{[]byte("ab"), nil, []byte("cde"), []byte("f")}, []int{3, 3, 1}, []string{"abc", "def", ""}},
		{"exact", [][]byte{[]byte("ab"), []byte("cd")}, []int{4, 1}, []string{"abcd", ""}},
		{"zero-length read", [][]byte{[]byte("ab")}, []int{0, 2}, []string{"", "ab"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r segReader
			r.reset(tt.segs)
			var got []string
			for _, n := range tt.read {
				p := make([]byte, n)
				k, err := r.Read(p)
				if err != nil && err != io.EOF {
					t.Fatal(err)
				}
				if err == io.EOF && k != 0 {
					t.Fatalf("EOF with %d bytes", k)
				}
				got = append(got, string(p[:k]))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reads (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSegWriter(t *testing.T) {
	a, b := make([]byte, 3), make([]byte, 2)
	var w segWriter
	w.reset([][]byte{a, nil, b})
	if n, err := w.Write([]byte("abcd")); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("ef")); n != 1 || err != io.ErrShortWrite {
		t.Fatalf("overflowing Write = %d, %v; want 1, io.ErrShortWrite", n, err)
	}
	if got := string(a) + string(b); got != "abcde" {
		t.Errorf("segments hold %q, want %q", got, "abcde")
	}
}

// FuzzSegIO checks the gather reader, the scatter writer and readInto
// against plain concatenation, for any split of the data.
func FuzzSegIO(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{3, 0, 5, 9}, uint8(4))
	f.Add([]byte{}, []byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, data, cuts []byte, chunk uint8) {
		segs := split(data, cuts)
		// Reader, in chunks.
		var r segReader
		r.reset(segs)
		var got []byte
		p := make([]byte, int(chunk)+1)
		for {
			n, err := r.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("Read = %d, %v", n, err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("reader yielded %q, want %q", got, data)
		}
		// WriteTo.
		r.reset(segs)
		var buf bytes.Buffer
		if n, err := r.WriteTo(&buf); err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("WriteTo = %d, %v, %q", n, err, buf.Bytes())
		}
		// Writer, then readInto, into segments shaped like segs.
		dst := split(make([]byte, len(data)), cuts)
		var w segWriter
		w.reset(dst)
		for rest := data; len(rest) > 0; {
			k := min(len(rest), int(chunk)+1)
			if n, err := w.Write(rest[:k]); err != nil || n != k {
				t.Fatalf("Write = %d, %v", n, err)
			}
			rest = rest[k:]
		}
		if got := bytes.Join(dst, nil); !bytes.Equal(got, data) {
			t.Fatalf("writer placed %q, want %q", got, data)
		}
		dst = split(make([]byte, len(data)), cuts)
		if err := readInto(bytes.NewReader(data), dst, len(data)); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(dst, nil); !bytes.Equal(got, data) {
			t.Fatalf("readInto placed %q, want %q", got, data)
		}
	})
}

// split cuts data into segments at the offsets given by cuts.
func split(data, cuts []byte) [][]byte {
	var segs [][]byte
	for _, c := range cuts {
		n := min(int(c), len(data))
		segs = append(segs, data[:n:n])
		data = data[n:]
	}
	return append(segs, data)
}

// TestSegIOBig checks the reader and the writer over transfers around
// bigcopy.Min bytes (copied by bigcopy.Copy from Min on), in 4 pieces at
// odd offsets of their buffers, against plain concatenation.
func TestSegIOBig(t *testing.T) {
	for _, total := range []int{bigcopy.Min - 1, bigcopy.Min, bigcopy.Min + 4099} {
		t.Run(strconv.Itoa(total), func(t *testing.T) {
			data := make([]byte, total)
			for i := range data {
				data[i] = byte(i*131 + i>>11)
			}
			q := total / 4
			cuts := []int{0, q - 3, 2*q + 5, 3*q + 1, total}
			pieces := func(src []byte) [][]byte {
				var segs [][]byte
				for i := range 4 {
					// Each piece in a buffer of its own, 3 bytes in.
					b := make([]byte, cuts[i+1]-cuts[i]+3)
					copy(b[3:], src[cuts[i]:cuts[i+1]])
					segs = append(segs, b[3:])
				}
				return segs
			}
			var r segReader
			r.reset(pieces(data))
			got := make([]byte, total+1) // 1 byte in: unaligned too
			if _, err := io.ReadFull(&r, got[1:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[1:], data) {
				t.Fatal("reader yielded other bytes than the pieces'")
			}
			dst := pieces(make([]byte, total))
			var w segWriter
			w.reset(dst)
			if n, err := w.Write(data); n != total || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			if !bytes.Equal(bytes.Join(dst, nil), data) {
				t.Fatal("writer placed other bytes than written")
			}
		})
	}
}
