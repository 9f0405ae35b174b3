package proofs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

// ErrSpec reports a configuration or trace text that cannot be parsed.
// Test for it with errors.Is.
var ErrSpec = errors.New("malformed model-checking configuration")

// Spec is one bounded configuration to check: the engine settings of each
// endpoint and what each endpoint's application does. Endpoint A is Ends[0]
// and Scripts[0], endpoint B is Ends[1] and Scripts[1]. The zero value is
// not a valid Spec: Mode and Type are required.
//
// A Spec has a one-line text form (String, ParseSpec), for example
//
//	mode=dynamic type=stream ring=2 frames=1 a.sends=1,2,3 a.shutdown b.recvs=2,1w,3 b.drain=3
//
// where a recv length followed by "w" is a MSG_WAITALL recv, and "a.close"
// lets endpoint A's application close it at any point. A "*" for a
// length leaves it to a choice the application makes when it posts, among
// a.choose (sends) or a.rchoose (recvs), as in
//
//	mode=dynamic type=stream ring=2 frames=2 a.sends=*,*,* a.choose=1,2,3 a.shutdown b.recvs=*,* b.rchoose=1,2w b.drain=3
//
// and the checker explores every choice. An engine setting without a
// prefix (ring=2) applies to both endpoints; with one (b.ring=3) to that
// endpoint only, whatever the order. Settings that are zero or empty are
// left out.
//
// A Spec is a plain value; Check and Replay only read it.
type Spec struct {
	Mode dynproto.Mode
	Type dynproto.SockType
	// Ends are the engine settings of endpoints A and B.
	Ends [2]End
	// Scripts are the applications of endpoints A and B.
	Scripts [2]sim.Script
}

// End is one endpoint's engine settings, in units (bytes on a stream,
// message bytes in seqpacket mode), with their text names.
type End struct {
	// Ring (ring) is the size of the endpoint's stream buffer, into which
	// its peer writes; 0 is allowed only in direct-only mode.
	Ring int
	// Frames (frames) is the number of frame receive buffers the endpoint
	// keeps posted for regular frames (its peer's frame credits).
	Frames int
	// Ack (ack) is its AckThreshold (0: half its stream buffer).
	Ack int
	// Gather (gather) is its MaxGather (0: the engine's default).
	Gather int
	// MaxInd (maxind) is its MaxIndirect (0: no limit).
	MaxInd int
	// AdvMin (advmin) is its AdvertMin (0: every recv is advertised).
	AdvMin int
	// HintMin (hintmin) is its HintMin (0: a 32nd of the stream buffer,
	// at least 1: 1 for every ring here).
	HintMin int
	// NoHeld (noheld) is its NoHeldHint.
	NoHeld bool
	// Seq (seq) and Phase (phase) are where its outgoing stream starts
	// (InitialSeq, InitialPhase); in the text form a negative number
	// counts back from the wrap: seq=-2 is 2^64-2, phase=-2 is 2^32-2.
	Seq   dynproto.Seq
	Phase dynproto.Phase
	// Forge (forge) makes the endpoint an adversary: in every state, each
	// wrong frame it could send next must be refused by its peer
	// (sim.World.CheckForgeries).
	Forge bool
}

// SimConfig returns the simulation configuration the Spec stands for.
func (s *Spec) SimConfig() *sim.Config {
	var c sim.Config
	for i := range 2 {
		e, peer := &s.Ends[i], &s.Ends[1-i]
		c.Engine[i] = dynproto.Config{
			Mode: s.Mode, Type: s.Type,
			RecvBuffer: e.Ring, PeerRecvBuffer: peer.Ring,
			Frames: e.Frames, PeerFrames: peer.Frames,
			AckThreshold: e.Ack, MaxGather: e.Gather,
			MaxIndirect: e.MaxInd, AdvertMin: e.AdvMin,
			HintMin: e.HintMin, NoHeldHint: e.NoHeld,
			InitialSeq: e.Seq, InitialPhase: e.Phase,
			PeerInitialSeq: peer.Seq, PeerInitialPhase: peer.Phase,
		}
		c.Forge[i] = e.Forge
		sc := s.Scripts[i]
		sc.Sends = slices.Clone(sc.Sends)
		sc.Recvs = slices.Clone(sc.Recvs)
		c.Scripts[i] = sc
	}
	return &c
}

// endField is an engine setting of End in the text form.
type endField struct {
	name   string
	always bool // written even when zero
	flag   bool // a flag: no value
	get    func(e *End) string
	set    func(e *End, val string) error
}

func countField(name string, always bool, f func(e *End) *int) endField {
	return endField{
		name: name, always: always,
		get: func(e *End) string { return strconv.Itoa(*f(e)) },
		set: func(e *End, val string) (err error) { *f(e), err = parseCount(val); return err },
	}
}

var endFields = []endField{
	countField("ring", true, func(e *End) *int { return &e.Ring }),
	countField("frames", true, func(e *End) *int { return &e.Frames }),
	countField("ack", false, func(e *End) *int { return &e.Ack }),
	countField("gather", false, func(e *End) *int { return &e.Gather }),
	countField("maxind", false, func(e *End) *int { return &e.MaxInd }),
	countField("advmin", false, func(e *End) *int { return &e.AdvMin }),
	countField("hintmin", false, func(e *End) *int { return &e.HintMin }),
	{
		name: "noheld", flag: true,
		get: func(e *End) string { return strconv.FormatBool(e.NoHeld) },
		set: func(e *End, _ string) error { e.NoHeld = true; return nil },
	},
	{
		name: "forge", flag: true,
		get: func(e *End) string { return strconv.FormatBool(e.Forge) },
		set: func(e *End, _ string) error { e.Forge = true; return nil },
	},
	{
		name: "seq",
		get:  func(e *End) string { return formatSerial(uint64(e.Seq), 64) },
		set: func(e *End, val string) error {
			v, err := parseSerial(val, 64)
			e.Seq = dynproto.Seq(v)
			return err
		},
	},
	{
		name: "phase",
		get:  func(e *End) string { return formatSerial(uint64(e.Phase), 32) },
		set: func(e *End, val string) error {
			v, err := parseSerial(val, 32)
			e.Phase = dynproto.Phase(v)
			return err
		},
	},
}

// isZero reports whether the field's value in e is its zero value.
func (f *endField) isZero(e *End) bool {
	var zero End
	return f.get(e) == f.get(&zero)
}

// write writes the field for both ends (once, without a prefix, if they
// agree).
func (f *endField) write(b *strings.Builder, ends *[2]End) {
	a, bv := f.get(&ends[0]), f.get(&ends[1])
	if a == bv {
		if f.always || !f.isZero(&ends[0]) {
			b.WriteString(" " + f.text("", a))
		}
		return
	}
	for i := range ends {
		if f.always || !f.isZero(&ends[i]) {
			b.WriteString(" " + f.text(string(rune('a'+i))+".", f.get(&ends[i])))
		}
	}
}

func (f *endField) text(prefix, val string) string {
	if f.flag {
		return prefix + f.name
	}
	return prefix + f.name + "=" + val
}

// formatSerial writes a serial number of the given width, counting back
// from the wrap (as a negative number) in its upper half.
func formatSerial(v uint64, bits uint) string {
	mask := ^uint64(0) >> (64 - bits)
	if v >= 1<<(bits-1) {
		return "-" + strconv.FormatUint(mask-v+1, 10)
	}
	return strconv.FormatUint(v, 10)
}

// parseSerial reads what formatSerial writes, and nothing else.
func parseSerial(val string, bits uint) (uint64, error) {
	mask := ^uint64(0) >> (64 - bits)
	n, err := strconv.ParseUint(strings.TrimPrefix(val, "-"), 10, 64)
	v := n
	if strings.HasPrefix(val, "-") {
		v = -n & mask
	}
	if err != nil || n > mask || formatSerial(v, bits) != val {
		return 0, fmt.Errorf("%w: serial number %q", ErrSpec, val)
	}
	return v, nil
}

// String returns the Spec's one-line text form, which ParseSpec reads back.
func (s Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%v type=%v", s.Mode, s.Type)
	for k := range endFields {
		endFields[k].write(&b, &s.Ends)
	}
	for i, sc := range s.Scripts {
		p := string(rune('a' + i))
		if len(sc.Sends) > 0 {
			fmt.Fprintf(&b, " %s.sends=", p)
			writeInts(&b, sc.Sends)
		}
		if len(sc.SendChoices) > 0 {
			fmt.Fprintf(&b, " %s.choose=", p)
			writeInts(&b, sc.SendChoices)
		}
		if sc.Shutdown {
			fmt.Fprintf(&b, " %s.shutdown", p)
		}
		if len(sc.Recvs) > 0 {
			fmt.Fprintf(&b, " %s.recvs=", p)
			writeRecvs(&b, sc.Recvs)
		}
		if len(sc.RecvChoices) > 0 {
			fmt.Fprintf(&b, " %s.rchoose=", p)
			writeRecvs(&b, sc.RecvChoices)
		}
		if sc.DrainLen != 0 {
			fmt.Fprintf(&b, " %s.drain=%d", p, sc.DrainLen)
		}
		if sc.Close {
			fmt.Fprintf(&b, " %s.close", p)
		}
	}
	return b.String()
}

func writeInts(b *strings.Builder, ns []int) {
	for k, n := range ns {
		if k > 0 {
			b.WriteByte(',')
		}
		if n == sim.Choose {
			b.WriteByte('*')
		} else {
			b.WriteString(strconv.Itoa(n))
		}
	}
}

func writeRecvs(b *strings.Builder, ops []sim.RecvOp) {
	for k, r := range ops {
		if k > 0 {
			b.WriteByte(',')
		}
		if r.Len == sim.Choose {
			b.WriteByte('*')
			continue
		}
		b.WriteString(strconv.Itoa(r.Len))
		if r.WaitAll {
			b.WriteByte('w')
		}
	}
}

// maxUnits bounds every size in a parsed Spec: the checker explores small
// worlds only, and a bound keeps a hostile text from asking for huge ones.
const maxUnits = 1 << 16

// ParseSpec reads a Spec from its text form (see Spec). It rejects unknown
// or repeated fields and values out of range with an error matching ErrSpec;
// it does not judge whether the engines accept the configuration (sim.New
// does).
func ParseSpec(text string) (Spec, error) {
	var s Spec
	seen := map[string]bool{}
	type endSetting struct {
		ends []int
		f    *endField
		val  string
	}
	// Settings for both ends apply first, then those for one end.
	var both, one []endSetting
	for _, tok := range strings.Fields(text) {
		key, val, hasVal := strings.Cut(tok, "=")
		if seen[key] {
			return Spec{}, fmt.Errorf("%w: field %q repeated", ErrSpec, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "mode":
			s.Mode, err = parseMode(val)
		case "type":
			s.Type, err = parseType(val)
		default:
			end, name, prefixed := strings.Cut(key, ".")
			if !prefixed {
				name = end
			}
			f := lookupEndField(name)
			switch {
			case f == nil && !prefixed:
				err = fmt.Errorf("%w: unknown field %q", ErrSpec, key)
			case f == nil:
				err = parseScriptField(&s, key, val, hasVal)
			case f.flag == hasVal:
				err = fmt.Errorf("%w: field %q: a flag takes no value, a setting one", ErrSpec, key)
			case !prefixed:
				both = append(both, endSetting{[]int{0, 1}, f, val})
			case end == "a" || end == "b":
				one = append(one, endSetting{[]int{int(end[0] - 'a')}, f, val})
			default:
				err = fmt.Errorf("%w: unknown field %q", ErrSpec, key)
			}
		}
		if err != nil {
			return Spec{}, err
		}
	}
	for _, st := range append(both, one...) {
		for _, i := range st.ends {
			if err := st.f.set(&s.Ends[i], st.val); err != nil {
				return Spec{}, err
			}
		}
	}
	if s.Mode == 0 || s.Type == 0 {
		return Spec{}, fmt.Errorf("%w: mode and type are required", ErrSpec)
	}
	return s, nil
}

func lookupEndField(name string) *endField {
	for k := range endFields {
		if endFields[k].name == name {
			return &endFields[k]
		}
	}
	return nil
}

func parseScriptField(s *Spec, key, val string, hasVal bool) error {
	end, field, ok := strings.Cut(key, ".")
	if !ok || (end != "a" && end != "b") {
		return fmt.Errorf("%w: unknown field %q", ErrSpec, key)
	}
	sc := &s.Scripts[end[0]-'a']
	var err error
	switch field {
	case "sends":
		sc.Sends, err = parseList(val, func(f string) (int, error) {
			if f == "*" {
				return sim.Choose, nil
			}
			return parseCount(f)
		})
	case "choose":
		sc.SendChoices, err = parseList(val, func(f string) (int, error) { return parseCount(f) })
	case "recvs":
		sc.Recvs, err = parseList(val, func(f string) (sim.RecvOp, error) {
			if f == "*" {
				return sim.RecvOp{Len: sim.Choose}, nil
			}
			return parseRecv(f)
		})
	case "rchoose":
		sc.RecvChoices, err = parseList(val, parseRecv)
	case "shutdown", "close":
		if hasVal {
			return fmt.Errorf("%w: %q takes no value", ErrSpec, key)
		}
		if field == "close" {
			sc.Close = true
		} else {
			sc.Shutdown = true
		}
	case "drain":
		sc.DrainLen, err = parseCount(val)
	default:
		return fmt.Errorf("%w: unknown field %q", ErrSpec, key)
	}
	return err
}

// parseRecv reads a recv length, with a "w" suffix for MSG_WAITALL.
func parseRecv(f string) (sim.RecvOp, error) {
	op := sim.RecvOp{}
	if rest, ok := strings.CutSuffix(f, "w"); ok {
		op.WaitAll, f = true, rest
	}
	n, err := parseCount(f)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: empty recv", ErrSpec)
	}
	op.Len = n
	return op, err
}

func parseList[T any](val string, one func(string) (T, error)) ([]T, error) {
	fields := strings.Split(val, ",")
	if len(fields) > maxUnits {
		return nil, fmt.Errorf("%w: list of %d items", ErrSpec, len(fields))
	}
	out := make([]T, 0, len(fields))
	for _, f := range fields {
		v, err := one(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseCount(val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 || n > maxUnits || strconv.Itoa(n) != val {
		return 0, fmt.Errorf("%w: count %q", ErrSpec, val)
	}
	return n, nil
}

func parseMode(val string) (dynproto.Mode, error) {
	for _, m := range []dynproto.Mode{dynproto.Dynamic, dynproto.DirectOnly, dynproto.IndirectOnly} {
		if m.String() == val {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: mode %q", ErrSpec, val)
}

func parseType(val string) (dynproto.SockType, error) {
	for _, t := range []dynproto.SockType{dynproto.Stream, dynproto.SeqPacket} {
		if t.String() == val {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: socket type %q", ErrSpec, val)
}
