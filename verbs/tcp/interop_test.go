//go:build linux

package tcp_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
	"github.com/exsgo/exs/verbs/tcp"
)

// TestWiresharkDecodes checks the provider's traffic against code no one
// here wrote: Wireshark's iwarp_mpa and iwarp_ddp_rdmap dissectors. It
// captures loopback traffic (dumpcap) of a connection that carries a SEND,
// an RDMA WRITE, one of several segments, an RDMA WRITE with immediate
// data, an RDMA READ, a SEND with immediate data and, for a WRITE with a
// forged STag, the target's Terminate; tshark decodes the capture, and
// every FPDU must decode with the expected opcode and fields, a good CRC,
// and no malformed packet.
//
// It needs tshark and dumpcap (Debian's tshark package) and the right to
// capture: outside CI it skips without them; under CI=true it fails.
func TestWiresharkDecodes(t *testing.T) {
	need := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		need("tshark not found: install Debian's tshark package (apt-get install tshark)")
	}
	dumpcap, err := exec.LookPath("dumpcap")
	if err != nil {
		need("dumpcap not found: install Debian's tshark package (apt-get install tshark)")
	}

	// The dialer's segments carry 32 KiB of RDMA WRITE payload.
	pa, pb := tcp.New(tcp.WithSegmentSize(32<<10+14)), tcp.New()
	defer pa.Close()
	defer pb.Close()
	devA, _ := verbs.Open(pa)
	defer devA.Close()
	devB, _ := verbs.Open(pb)
	defer devB.Close()
	ln, err := devB.Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ln.Addr(), "tcp:"))

	// Capture the listener's port.
	pcap := filepath.Join(t.TempDir(), "iwarp.pcapng")
	if dir := os.Getenv("EXS_PCAP_DIR"); dir != "" {
		pcap = filepath.Join(dir, "iwarp.pcapng") // kept, to look at
	}
	capture := exec.Command(dumpcap, "-i", "lo", "-f", "tcp port "+port, "-w", pcap)
	stderr, _ := capture.StderrPipe()
	if err := capture.Start(); err != nil {
		need("dumpcap: %v", err)
	}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var all []string
		for sc.Scan() {
			all = append(all, sc.Text())
			if strings.HasPrefix(sc.Text(), "Capturing on") {
				started <- ""
			}
		}
		started <- strings.Join(all, "\n")
	}()
	if msg := <-started; msg != "" || capture.ProcessState != nil {
		capture.Wait()
		need("dumpcap cannot capture on lo (it needs root or CAP_NET_RAW): %s", msg)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			capture.Process.Signal(os.Interrupt)
			capture.Wait()
		}
	}
	defer stop()
	time.Sleep(100 * time.Millisecond)

	rkey, addr, sink := interopTraffic(t, devA, devB, ln)
	// The kernel hands packets to dumpcap in blocks, the last one after a
	// timeout (libpcap's 250 ms with TPACKET_V3): stopping dumpcap before
	// loses it. On a loaded machine dumpcap writes later still, so the
	// capture ends once its file has held the traffic's WRITE (over 32
	// KiB) and stopped growing for half a second, or after 20 s.
	time.Sleep(time.Second)
	var last int64 = -1
	for deadline, still := time.Now().Add(20*time.Second), time.Now(); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fi, err := os.Stat(pcap)
		if err != nil {
			continue
		}
		if fi.Size() != last {
			last, still = fi.Size(), time.Now()
		} else if last > 32<<10 && time.Since(still) >= 500*time.Millisecond {
			break
		}
	}
	stop()
	t.Logf("dumpcap: %s", <-started)

	// iwarp_mpa is a heuristic dissector of TCP (it knows the MPA
	// request's key, and follows the connection from there); tshark 4.0
	// does not offer it to -d.
	out, err := exec.Command(tshark, "-r", pcap, "--enable-heuristic", "iwarp_mpa_tcp",
		// Send payloads are exs's own, not RPC over RDMA nor SMB Direct,
		// whose heuristics would claim (and fail on) them.
		"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
		"-T", "pdml").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("tshark: %v", err)
	}
	var doc pdml
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("tshark's PDML: %v", err)
	}
	dirs := map[bool][]fpdu{} // by "from the dialer"
	var mpa []string
	for _, p := range doc.Packets {
		fromDialer := p.field("tcp.dstport") == port
		for i, pr := range p.Protos {
			switch pr.Name {
			case "_ws.malformed":
				t.Errorf("frame %s: malformed: %s", p.field("frame.number"), pr.Showname)
			case "iwarp_mpa":
				if pr.find("iwarp_mpa.key.req") != nil {
					mpa = append(mpa, "req crc="+pr.show("iwarp_mpa.crc_flag")+" rev="+pr.show("iwarp_mpa.rev")+" pd="+pr.value("iwarp_mpa.privatedata"))
					continue
				}
				if pr.find("iwarp_mpa.key.rep") != nil {
					mpa = append(mpa, "rep crc="+pr.show("iwarp_mpa.crc_flag")+" rej="+pr.show("iwarp_mpa.rej_flag")+" pd="+pr.value("iwarp_mpa.privatedata"))
					continue
				}
				if i+1 >= len(p.Protos) || p.Protos[i+1].Name != "iwarp_ddp_rdmap" {
					t.Errorf("frame %s: an FPDU without its DDP segment", p.field("frame.number"))
					continue
				}
				f := decodeFPDU(pr, p.Protos[i+1])
				if !strings.Contains(f.crc, "Good CRC32") {
					t.Errorf("frame %s: CRC %q", p.field("frame.number"), f.crc)
				}
				dirs[fromDialer] = append(dirs[fromDialer], f)
			}
		}
		for _, f := range p.allFields() {
			if strings.HasPrefix(f.Name, "_ws.expert") && strings.Contains(strings.ToLower(f.Showname), "malformed") {
				t.Errorf("frame %s: %s", p.field("frame.number"), f.Showname)
			}
		}
	}
	hexOf := func(s string) string { return hex.EncodeToString([]byte(s)) }
	if want := []string{"req crc=1 rev=1 pd=" + hexOf("exs interop"), "rep crc=1 rej=0 pd=" + hexOf("accepted")}; fmt.Sprint(mpa) != fmt.Sprint(want) {
		t.Errorf("MPA frames %q, want %q", mpa, want)
	}
	stag := fmt.Sprintf("0x%08x", rkey)
	const seg = 32 << 10
	to := func(off uint64) string { return fmt.Sprintf("0x%016x", addr+off) }
	// What the dialer sends, in order (fences, as zero-length reads, may
	// come between).
	want := []string{
		"ReadReq qn=1 msn=1 L size=0 srcstag=0x00000000", // ready to receive
		"Send qn=0 msn=1 mo=0 L len=64",
		"Write stag=" + stag + " to=" + to(0) + " L len=4096",
	}
	for off := uint64(0); off < 200<<10; off += seg {
		n, l := uint64(seg), "-"
		if off+seg >= 200<<10 {
			n, l = 200<<10-off, "L"
		}
		want = append(want, "Write stag="+stag+" to="+to(off)+" "+l+" len="+strconv.FormatUint(n, 10))
	}
	want = append(want,
		"Write stag="+stag+" to="+to(8192)+" L len=16",
		"Imm qn=0 msn=2 mo=0 L len=8",
		"ReadReq qn=1 msn=@ L size=100 srcstag="+stag,
		"Imm qn=0 msn=3 mo=0 L len=8",
		"Send qn=0 msn=4 mo=0 L len=5",
		"Write stag="+fmt.Sprintf("0x%08x", rkey^0x100000)+" to="+to(0)+" L len=8",
	)
	got := dirs[true]
	checkSubsequence(t, "dialer", got, want)
	// What the listener sends: its ready-to-receive, the READ's
	// response, and the Terminate for the forged STag.
	checkSubsequence(t, "listener", dirs[false], []string{
		"ReadReq qn=1 msn=1 L size=0 srcstag=0x00000000",
		"ReadResp stag=" + fmt.Sprintf("0x%08x", sink) + " to=0x0000000000000000 L len=100",
		"Terminate qn=2 msn=1 mo=0 L layer=0x01 etype=0x01 code=0x00 hdr=" + fmt.Sprintf("%08x", rkey^0x100000),
	})
	fences := 0
	for _, f := range got {
		if strings.HasPrefix(f.desc, "ReadReq") && strings.Contains(f.desc, "size=0 srcstag=0x00000000") {
			fences++
		}
	}
	t.Logf("%d FPDUs from the dialer (%d zero-length reads: the ready-to-receive and the fences), %d from the listener", len(got), fences, len(dirs[false]))
}

// interopTraffic connects a queue pair of devA to one of devB and sends
// every kind of message; it returns the target region's rkey and address
// and the Data Sink STag the READ's response must carry.
func interopTraffic(t *testing.T, devA, devB *verbs.Device, ln *verbs.Listener) (rkey uint32, addr uint64, sink uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newQP := func(d *verbs.Device) (*verbs.PD, *verbs.QP, *verbs.CQ) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64, verbs.CQOptions{})
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SignalAll: true})
		if err != nil {
			t.Fatal(err)
		}
		return pd, qp, cq
	}
	pdA, qa, cqa := newQP(devA)
	pdB, qb, cqb := newQP(devB)
	target := make([]byte, 256<<10)
	tmr, _ := pdB.RegisterMR(target, mreg.LocalWrite|mreg.RemoteWrite|mreg.RemoteRead)
	rbuf := make([]byte, 4*64)
	rmr, _ := pdB.RegisterMR(rbuf, mreg.LocalWrite)
	for i := range 4 {
		if err := qb.PostRecv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{rmr.SGE(64*i, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Accept(qb, []byte("accepted"))
		}
	}()
	if _, err := qa.Connect(ctx, ln.Addr(), []byte("exs interop")); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 256<<10)
	for i := range src {
		src[i] = byte(i)
	}
	smr, _ := pdA.RegisterMR(src, mreg.LocalWrite)
	wait := func(cq *verbs.CQ, n int) []verbs.WC {
		wcs := make([]verbs.WC, n)
		if _, err := cq.Wait(ctx, wcs, n); err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs {
			if wc.Status != verbs.StatusSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		return wcs
	}
	post := func(wr verbs.SendWR) {
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wait(cqa, 1)
	}
	post(verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{smr.SGE(0, 64)}})
	post(verbs.SendWR{WRID: 2, Opcode: verbs.OpWrite, SGL: []verbs.SGE{smr.SGE(0, 4096)}, RKey: tmr.RKey(), RemoteAddr: tmr.Addr()})
	post(verbs.SendWR{WRID: 3, Opcode: verbs.OpWrite, SGL: []verbs.SGE{smr.SGE(0, 200<<10)}, RKey: tmr.RKey(), RemoteAddr: tmr.Addr()})
	post(verbs.SendWR{WRID: 4, Opcode: verbs.OpWriteWithImm, Imm: 0xC0FFEE, SGL: []verbs.SGE{smr.SGE(0, 16)}, RKey: tmr.RKey(), RemoteAddr: tmr.Addr() + 8192})
	post(verbs.SendWR{WRID: 5, Opcode: verbs.OpRead, SGL: []verbs.SGE{smr.SGE(0, 100)}, RKey: tmr.RKey(), RemoteAddr: tmr.Addr()})
	post(verbs.SendWR{WRID: 6, Opcode: verbs.OpSendWithImm, Imm: 7, SGL: []verbs.SGE{smr.SGE(0, 5)}})
	wcs := wait(cqb, 3)
	if wcs[1].Opcode != verbs.WCRecvWithImm || wcs[1].Imm != 0xC0FFEE || wcs[1].ByteLen != 16 || wcs[2].Imm != 7 || wcs[2].ByteLen != 5 {
		t.Fatalf("the target's completions %+v", wcs)
	}
	// A forged STag: the target terminates.
	if err := qa.PostSend(verbs.SendWR{WRID: 7, Opcode: verbs.OpWrite, SGL: []verbs.SGE{smr.SGE(0, 8)}, RKey: tmr.RKey() ^ 0x100000, RemoteAddr: tmr.Addr()}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	if _, err := cqa.Wait(ctx, wc, 1); err != nil || wc[0].Status != verbs.StatusRemoteAccessError {
		t.Fatalf("the forged WRITE: %+v, %v", wc[0], err)
	}
	<-qb.Done()
	return uint32(tmr.RKey()), tmr.Addr(), 1<<31 | 1
}

// checkSubsequence checks that want's lines appear in got's descriptions
// in order ("@" in a line matches any MSN).
func checkSubsequence(t *testing.T, who string, got []fpdu, want []string) {
	t.Helper()
	i := 0
	for _, f := range got {
		if i < len(want) && matches(f.desc, want[i]) {
			i++
		}
	}
	if i < len(want) {
		var all []string
		for _, f := range got {
			all = append(all, f.desc)
		}
		t.Errorf("%s: no FPDU %q after the %d found; decoded:\n%s", who, want[i], i, strings.Join(all, "\n"))
	}
}

func matches(desc, want string) bool {
	if !strings.Contains(want, "@") {
		return desc == want
	}
	pre, post, _ := strings.Cut(want, "@")
	return strings.HasPrefix(desc, pre) && strings.HasSuffix(desc, post[strings.IndexByte(post, ' '):]) && strings.Contains(desc, strings.Fields(post)[0])
}

// fpdu is one decoded FPDU, described in one line.
type fpdu struct {
	desc string
	crc  string
}

func decodeFPDU(mpa, seg *pdmlProto) fpdu {
	f := fpdu{crc: mpa.showname("iwarp_mpa.crc_check")}
	op := seg.show("iwarp_rdma.opcode")
	ulpdu, _ := strconv.Atoi(mpa.show("iwarp_mpa.ulpdulength"))
	last := "-"
	if seg.show("iwarp_ddp.last_flag") == "1" {
		last = "L"
	}
	if seg.show("iwarp_ddp.tagged_flag") == "1" {
		name := map[string]string{"0x00": "Write", "0x02": "ReadResp"}[op]
		f.desc = fmt.Sprintf("%s stag=%s to=%s %s len=%d", name, seg.show("iwarp_ddp.stag"), seg.show("iwarp_ddp.tagged_offset"), last, ulpdu-14)
		return f
	}
	qn, msn, mo := seg.show("iwarp_ddp.qn"), seg.show("iwarp_ddp.msn"), seg.show("iwarp_ddp.mo")
	switch op {
	case "0x01":
		f.desc = fmt.Sprintf("ReadReq qn=%s msn=%s %s size=%s srcstag=%s", qn, msn, last, seg.show("iwarp_rdma.rdmardsz"), seg.show("iwarp_rdma.srcstag"))
		return f
	case "0x07":
		h := seg.value("iwarp_rdma.term_ddp_h")
		if len(h) >= 12 {
			h = h[4:12] // the STag of a tagged header copy
		}
		f.desc = fmt.Sprintf("Terminate qn=%s msn=%s mo=%s %s layer=%s etype=%s code=%s hdr=%s", qn, msn, mo, last,
			seg.show("iwarp_rdma.term_layer"), seg.show("iwarp_rdma.term_etype_ddp"), seg.show("iwarp_rdma.term_errcode_ddp_tagged"), h)
		return f
	}
	name := map[string]string{"0x03": "Send", "0x08": "Imm"}[op]
	if name == "" {
		name = "op" + op
	}
	f.desc = fmt.Sprintf("%s qn=%s msn=%s mo=%s %s len=%d", name, qn, msn, mo, last, ulpdu-18)
	return f
}

// PDML, tshark's XML: packets of protocols of fields.
type pdml struct {
	Packets []pdmlPacket `xml:"packet"`
}

type pdmlPacket struct {
	Protos []*pdmlProto `xml:"proto"`
}

type pdmlProto struct {
	Name     string       `xml:"name,attr"`
	Showname string       `xml:"showname,attr"`
	Fields   []*pdmlField `xml:"field"`
}

type pdmlField struct {
	Name     string       `xml:"name,attr"`
	Showname string       `xml:"showname,attr"`
	Show     string       `xml:"show,attr"`
	Value    string       `xml:"value,attr"`
	Fields   []*pdmlField `xml:"field"`
	Protos   []*pdmlProto `xml:"proto"`
}

func (p *pdmlPacket) field(name string) string {
	for _, pr := range p.Protos {
		if f := pr.find(name); f != nil {
			return f.Show
		}
	}
	return ""
}

func (p *pdmlPacket) allFields() []*pdmlField {
	var out []*pdmlField
	var walk func([]*pdmlField)
	walk = func(fs []*pdmlField) {
		for _, f := range fs {
			out = append(out, f)
			walk(f.Fields)
		}
	}
	for _, pr := range p.Protos {
		walk(pr.Fields)
	}
	return out
}

func (pr *pdmlProto) find(name string) *pdmlField {
	var walk func([]*pdmlField) *pdmlField
	walk = func(fs []*pdmlField) *pdmlField {
		for _, f := range fs {
			if f.Name == name {
				return f
			}
			if g := walk(f.Fields); g != nil {
				return g
			}
		}
		return nil
	}
	return walk(pr.Fields)
}

// value returns a field's raw bytes in hex, show its value as tshark
// shows it, showname its whole line ("CRC check: 0x... (Good CRC32)").
func (pr *pdmlProto) value(name string) string {
	if f := pr.find(name); f != nil {
		return strings.ToLower(f.Value)
	}
	return ""
}

func (pr *pdmlProto) show(name string) string {
	if f := pr.find(name); f != nil {
		return f.Show
	}
	return ""
}

func (pr *pdmlProto) showname(name string) string {
	if f := pr.find(name); f != nil {
		return f.Showname
	}
	return ""
}
