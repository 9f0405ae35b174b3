package measure

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/exsgo/exs/exs"
)

// FuzzControlMessage feeds the control channel's reader what a peer could
// send: a length and a JSON body. It never reads past the length it
// accepted (at most maxHeader), and a request of exs's server passes its
// checks only with parameters inside their bounds.
func FuzzControlMessage(f *testing.F) {
	add := func(v any) {
		var b bytes.Buffer
		writeMsg(&b, v)
		f.Add(b.Bytes())
	}
	add(request{Test: "stream", Size: 1 << 20})
	add(exsRequest{request: request{Test: "pingpong", Size: 64}, Mode: "dynamic", Sends: 4, Recvs: 4, Ring: 1 << 20})
	add(exsRequest{request: request{Test: "stream", Size: 1 << 26, Wait: "adaptive"}, Mode: "direct-only", Sends: 4096, Recvs: 4096, Ring: 1})
	add(reply{Bytes: 10, Elapsed: 3})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 10, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var req exsRequest
		if err := readMsg(r, &req); err != nil {
			return
		}
		if n := len(data) - r.Len(); n > 4+maxHeader || n != 4+int(binary.BigEndian.Uint32(data)) {
			t.Fatalf("read %d bytes of a %d-byte message", n, binary.BigEndian.Uint32(data))
		}
		p, _, err := req.params()
		if err != nil {
			return
		}
		if p.Size < 1 || p.Size > 64<<20 || p.Sends < 1 || p.Sends > 4096 || p.Recvs < 1 || p.Recvs > 4096 ||
			p.Ring < 1 || p.Ring > exs.MaxStreamBuffer || int64(p.Size)*int64(p.Sends+p.Recvs) > 4<<30 {
			t.Fatalf("params of %+v passed: %+v", req, p)
		}
	})
}
