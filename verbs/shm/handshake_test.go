//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exsgo/exs/verbs"
)

// rawReply builds a reply byte by byte, whatever its fields hold.
func rawReply(kind, rnr, cma byte, private []byte) []byte {
	b := make([]byte, replyLen+len(private))
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	b[4], b[5], b[6] = kind, rnr, cma
	binary.LittleEndian.PutUint16(b[8:], uint16(len(private)))
	copy(b[replyLen:], private)
	return b
}

// TestParseReply checks the dialer's decoding of the listener's reply: an
// accept must name an RNR policy, as the listener requires of the request.
func TestParseReply(t *testing.T) {
	pd := []byte("hello")
	badMagic := rawReply(replyAccept, byte(verbs.RNRWait), 1, nil)
	badMagic[0] ^= 1
	longLen := rawReply(replyAccept, byte(verbs.RNRWait), 1, pd)
	binary.LittleEndian.PutUint16(longLen[8:], uint16(len(pd)+1))
	tooMuch := rawReply(replyReject, 0, 0, make([]byte, verbs.MaxPrivateData+1))
	tests := []struct {
		name string
		b    []byte
		want replyMsg // zero: an error wrapping errProtocol
	}{
		{"AcceptWait", rawReply(replyAccept, byte(verbs.RNRWait), 1, pd),
			replyMsg{kind: replyAccept, rnr: verbs.RNRWait, cma: true, private: pd}},
		{"AcceptFail", rawReply(replyAccept, byte(verbs.RNRFail), 0, nil),
			replyMsg{kind: replyAccept, rnr: verbs.RNRFail}},
		{"AcceptMaxPrivate", rawReply(replyAccept, byte(verbs.RNRFail), 0, make([]byte, verbs.MaxPrivateData)),
			replyMsg{kind: replyAccept, rnr: verbs.RNRFail, private: make([]byte, verbs.MaxPrivateData)}},
		{"Reject", rawReply(replyReject, 0, 0, pd), replyMsg{kind: replyReject, private: pd}},
		{"RejectAnyRNR", rawReply(replyReject, 200, 1, nil), replyMsg{kind: replyReject, cma: true}},
		{"AcceptRNRZero", rawReply(replyAccept, 0, 1, nil), replyMsg{}},
		{"AcceptRNRThree", rawReply(replyAccept, 3, 1, nil), replyMsg{}},
		{"AcceptRNR255", rawReply(replyAccept, 255, 1, pd), replyMsg{}},
		{"UnknownKind", rawReply(3, byte(verbs.RNRWait), 1, nil), replyMsg{}},
		{"KindZero", rawReply(0, byte(verbs.RNRWait), 1, nil), replyMsg{}},
		{"Short", rawReply(replyAccept, byte(verbs.RNRWait), 1, nil)[:replyLen-1], replyMsg{}},
		{"Empty", nil, replyMsg{}},
		{"BadMagic", badMagic, replyMsg{}},
		{"LengthMismatch", longLen, replyMsg{}},
		{"TrailingByte", append(rawReply(replyAccept, byte(verbs.RNRWait), 1, nil), 0), replyMsg{}},
		{"PrivateTooLong", tooMuch, replyMsg{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReply(tt.b)
			if tt.want.kind == 0 {
				if !errors.Is(err, errProtocol) {
					t.Errorf("parseReply = %+v, %v; want an error wrapping errProtocol", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseReply: %v", err)
			}
			if got.kind != tt.want.kind || got.rnr != tt.want.rnr || got.cma != tt.want.cma ||
				!bytes.Equal(got.private, tt.want.private) {
				t.Errorf("parseReply = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseReply feeds arbitrary bytes to the reply decoder: it must not
// panic, and what it accepts must be well formed and encode back to the
// same bytes (up to the encoding of the cross-memory-attach flag and the
// reserved byte, and the RNR byte of a reject, which carries none).
func FuzzParseReply(f *testing.F) {
	f.Add(rawReply(replyAccept, byte(verbs.RNRWait), 1, []byte("x")))
	f.Add(rawReply(replyAccept, byte(verbs.RNRFail), 0, nil))
	f.Add(rawReply(replyReject, 0, 0, []byte("no")))
	f.Add(rawReply(replyAccept, 9, 1, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseReply(b)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v does not wrap errProtocol", err)
			}
			return
		}
		switch {
		case m.kind == replyAccept && !validRNR(m.rnr):
			t.Fatalf("accepted an accept with RNR policy %d", m.rnr)
		case m.kind != replyAccept && m.kind != replyReject:
			t.Fatalf("accepted a reply of kind %d", m.kind)
		case len(m.private) > verbs.MaxPrivateData:
			t.Fatalf("accepted %d bytes of private data", len(m.private))
		}
		again := make([]byte, replyLen+verbs.MaxPrivateData)
		n := putReply(again, m)
		want := bytes.Clone(b)
		want[6], want[7] = again[6], again[7]
		if m.kind == replyReject {
			want[5] = again[5]
		}
		if !bytes.Equal(again[:n], want) {
			t.Fatalf("decoded reply encodes differently:\n%x\n%x", b, again[:n])
		}
	})
}

// TestDialBadReplyRNR dials a listener that speaks the handshake but
// accepts with an RNR policy that does not exist: the connect fails with
// an error wrapping errProtocol, and the queue pair can connect again.
func TestDialBadReplyRNR(t *testing.T) {
	dir := t.TempDir()
	if len(dir) > 80 {
		t.Skip("temporary directory too long for a socket path")
	}
	path := dir + "/ln"
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		var hello [helloLen]byte
		binary.LittleEndian.PutUint32(hello[0:], msgMagic)
		binary.LittleEndian.PutUint16(hello[4:], protoVersion)
		if _, err := c.Write(hello[:]); err != nil {
			served <- err
			return
		}
		b := make([]byte, maxHandshake)
		oob := make([]byte, unix.CmsgSpace(4*4))
		_, oobn, _, _, err := c.ReadMsgUnix(b, oob)
		closeFDs(parseFDs(oob[:oobn]))
		if err != nil {
			served <- err
			return
		}
		_, err = c.Write(rawReply(replyAccept, 7, 0, nil))
		served <- err
		c.Read(b) // until the dialer closes
	}()

	p := mustNew()
	dev, err := verbs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(16, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = qp.Connect(ctx, Scheme+path, nil)
	if !errors.Is(err, errProtocol) {
		t.Fatalf("Connect = %v, want an error wrapping errProtocol", err)
	}
	t.Log(err)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if s := qp.State(); s != verbs.StateInit {
		t.Errorf("queue pair in state %v after the failed connect, want Init", s)
	}
	if n := len(p.Stats()); n != 0 {
		t.Errorf("%d connections after the failed connect", n)
	}
}
