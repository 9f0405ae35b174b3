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

// Spec is one bounded configuration to check: the engine settings, shared by
// both endpoints, and what each endpoint's application does. Endpoint A is
// Scripts[0], endpoint B is Scripts[1]. The zero value is not a valid Spec:
// Mode and Type are required.
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
// and the checker explores every choice. Fields that are zero or empty are
// left out.
//
// A Spec is a plain value; Check and Replay only read it.
type Spec struct {
	Mode dynproto.Mode
	Type dynproto.SockType
	// Ring is the size of each endpoint's stream buffer, in units (bytes on
	// a stream); 0 is allowed only in direct-only mode.
	Ring int
	// Frames is the number of frame receive buffers each endpoint keeps
	// posted for regular frames (the peer's frame credits).
	Frames int
	// Ack is the engines' AckThreshold (0: half the stream buffer).
	Ack int
	// Gather is the engines' MaxGather (0: the engine's default).
	Gather int
	// MaxInd is the engines' MaxIndirect (0: no limit).
	MaxInd int
	// AdvMin is the engines' AdvertMin (0: every recv is advertised).
	AdvMin int
	// Scripts are the applications of endpoints A and B.
	Scripts [2]sim.Script
}

// SimConfig returns the simulation configuration the Spec stands for.
func (s *Spec) SimConfig() *sim.Config {
	var c sim.Config
	for i := range 2 {
		c.Engine[i] = dynproto.Config{
			Mode: s.Mode, Type: s.Type,
			RecvBuffer: s.Ring, PeerRecvBuffer: s.Ring,
			Frames: s.Frames, PeerFrames: s.Frames,
			AckThreshold: s.Ack, MaxGather: s.Gather,
			MaxIndirect: s.MaxInd, AdvertMin: s.AdvMin,
		}
		sc := s.Scripts[i]
		sc.Sends = slices.Clone(sc.Sends)
		sc.Recvs = slices.Clone(sc.Recvs)
		c.Scripts[i] = sc
	}
	return &c
}

// String returns the Spec's one-line text form, which ParseSpec reads back.
func (s Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%v type=%v ring=%d frames=%d", s.Mode, s.Type, s.Ring, s.Frames)
	if s.Ack != 0 {
		fmt.Fprintf(&b, " ack=%d", s.Ack)
	}
	if s.Gather != 0 {
		fmt.Fprintf(&b, " gather=%d", s.Gather)
	}
	if s.MaxInd != 0 {
		fmt.Fprintf(&b, " maxind=%d", s.MaxInd)
	}
	if s.AdvMin != 0 {
		fmt.Fprintf(&b, " advmin=%d", s.AdvMin)
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
		case "ring":
			s.Ring, err = parseCount(val)
		case "frames":
			s.Frames, err = parseCount(val)
		case "ack":
			s.Ack, err = parseCount(val)
		case "gather":
			s.Gather, err = parseCount(val)
		case "maxind":
			s.MaxInd, err = parseCount(val)
		case "advmin":
			s.AdvMin, err = parseCount(val)
		default:
			err = parseScriptField(&s, key, val, hasVal)
		}
		if err != nil {
			return Spec{}, err
		}
	}
	if s.Mode == 0 || s.Type == 0 {
		return Spec{}, fmt.Errorf("%w: mode and type are required", ErrSpec)
	}
	return s, nil
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
