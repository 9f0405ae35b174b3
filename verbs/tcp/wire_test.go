package tcp

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/exsgo/exs/verbs"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the fuzz seed corpus in testdata/fuzz")

// TestSeedCorpus checks that testdata/fuzz holds the seeds of the fuzz
// targets (go test runs them); with -update-seeds it writes them.
func TestSeedCorpus(t *testing.T) {
	write := func(target, name string, vals ...any) {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch v := v.(type) {
			case bool:
				fmt.Fprintf(&b, "bool(%v)\n", v)
			case []byte:
				fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
			}
		}
		path := filepath.Join("testdata", "fuzz", target, name)
		if *updateSeeds {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, b.Bytes()) {
			t.Errorf("%s is not the seed the test makes (run go test -run TestSeedCorpus -update-seeds): %v", path, err)
		}
	}
	for i, s := range mpaSeeds() {
		write("FuzzMPAFrame", fmt.Sprintf("seed-%02d", i), s.reply, s.b)
	}
	for i, s := range fpduSeeds() {
		write("FuzzFPDU", fmt.Sprintf("seed-%02d", i), s.crc, s.b)
	}
}

// TestMPARoundTrip encodes and parses frames of both kinds.
func TestMPARoundTrip(t *testing.T) {
	for _, f := range []mpaFrame{
		{crc: true, rev: 1, private: []byte("request")},
		{reply: true, rev: 1},
		{reply: true, reject: true, crc: true, rev: 1, private: bytes.Repeat([]byte{1}, verbs.MaxPrivateData)},
	} {
		b := appendMPA(nil, f)
		got, err := readMPA(bytes.NewReader(append(b, 0xFF)), f.reply, new([mpaHdrLen + verbs.MaxPrivateData]byte))
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if got.crc != f.crc || got.reject != f.reject || got.markers != f.markers || !bytes.Equal(got.private, f.private) {
			t.Errorf("parsed %+v, sent %+v", got, f)
		}
	}
	// Wrong kind, revision, reserved bits, private data over 512 bytes.
	for _, b := range [][]byte{
		appendMPA(nil, mpaFrame{reply: true, rev: 1}),
		appendMPA(nil, mpaFrame{rev: 2}),
		func() []byte { b := appendMPA(nil, mpaFrame{rev: 1}); b[16] |= 1; return b }(),
		func() []byte { b := appendMPA(nil, mpaFrame{rev: 1}); b[18], b[19] = 0x02, 0x01; return b }(),
	} {
		if _, err := readMPA(bytes.NewReader(b), false, new([mpaHdrLen + verbs.MaxPrivateData]byte)); !errors.Is(err, errMPA) {
			t.Errorf("readMPA(%x): %v, want errMPA", b, err)
		}
	}
}

// TestDecodeStream decodes a stream of every FPDU the provider sends.
func TestDecodeStream(t *testing.T) {
	for _, crc := range []bool{true, false} {
		seed := fpduSeeds()[0]
		if !crc {
			seed = fpduSeeds()[1]
		}
		d := decoder{r: bytes.NewReader(seed.b), crc: crc}
		var ops []uint8
		for {
			h, err := d.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := d.discard(); err != nil {
				t.Fatal(err)
			}
			if err := d.end(); err != nil {
				t.Fatal(err)
			}
			ops = append(ops, h.op)
		}
		want := []uint8{opReadReq, opSend, opWrite, opWrite, opImm, opReadReq, opReadResp, opTerminate}
		if !bytes.Equal(ops, want) {
			t.Errorf("crc %v: opcodes %v, want %v", crc, ops, want)
		}
	}
	// A bad CRC, a short ULPDU, a bad version, a bad queue number.
	for i, want := range []*wireError{errCRC, {layer: layerLLP, code: codeLengthField}, {layer: layerDDP, etype: etypeUntagged, code: codeUBadVersion}, {layer: layerDDP, etype: etypeUntagged, code: codeUInvalidQN}} {
		seed := fpduSeeds()[2+i]
		d := decoder{r: bytes.NewReader(seed.b), crc: true}
		var err error
		for err == nil {
			if _, err = d.next(); err == nil {
				if err = d.discard(); err == nil {
					err = d.end()
				}
			}
		}
		var we *wireError
		if !errors.As(err, &we) || we.layer != want.layer || we.etype != want.etype || we.code != want.code {
			t.Errorf("seed %d: %v, want layer %d type %d code %d", 2+i, err, want.layer, want.etype, want.code)
		}
	}
}

// TestTerminateRoundTrip encodes and parses Terminates with and without
// header copies.
func TestTerminateRoundTrip(t *testing.T) {
	tagged := putTagged(make([]byte, 16), opWrite, true, 0xAB, 0x1000, 8)[2:]
	untagged := putUntagged(make([]byte, 20), opReadReq, true, qnRead, 3, 0, readReqLen)[2:]
	rr := (&readRequest{sinkSTag: 1, size: 8, srcSTag: 2, srcTO: 3}).put(make([]byte, readReqLen))
	for _, in := range []termInfo{
		{layer: layerRDMAP, etype: etypeLocalCatastrophic, code: codeUnspecified},
		{layer: layerDDP, etype: etypeTagged, code: codeTBounds, segLen: 22, hdr: tagged},
		{layer: layerRDMAP, etype: etypeRemoteProtection, code: codeAccess, segLen: 46, hdr: untagged, rdma: rr},
	} {
		b := appendTerm(nil, &in)
		if len(b) > maxTermLen {
			t.Fatalf("%d bytes, limit %d", len(b), maxTermLen)
		}
		got, err := parseTerm(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.layer != in.layer || got.etype != in.etype || got.code != in.code || got.segLen != in.segLen ||
			!bytes.Equal(got.hdr, in.hdr) || !bytes.Equal(got.rdma, in.rdma) {
			t.Errorf("parsed %+v, sent %+v", got, in)
		}
	}
}
