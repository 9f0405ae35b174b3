package proofs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

func TestSpecText(t *testing.T) {
	tests := []struct {
		text string
		want Spec
	}{
		{
			text: "mode=dynamic type=stream ring=2 frames=1 a.sends=1,2,3 a.shutdown b.recvs=2,1w,3 b.drain=3",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: both(End{Ring: 2, Frames: 1}), Scripts: [2]sim.Script{
				{Sends: []int{1, 2, 3}, Shutdown: true},
				{Recvs: []sim.RecvOp{{Len: 2}, {Len: 1, WaitAll: true}, {Len: 3}}, DrainLen: 3},
			}},
		},
		{
			text: "mode=direct-only type=seqpacket ring=0 frames=3 ack=1 gather=2 a.sends=0,2 a.recvs=1 a.drain=1 b.sends=4 b.shutdown",
			want: Spec{Mode: dynproto.DirectOnly, Type: dynproto.SeqPacket, Ends: both(End{Frames: 3, Ack: 1, Gather: 2}), Scripts: [2]sim.Script{
				{Sends: []int{0, 2}, Recvs: []sim.RecvOp{{Len: 1}}, DrainLen: 1},
				{Sends: []int{4}, Shutdown: true},
			}},
		},
		{
			text: "mode=dynamic type=stream ring=2 frames=2 a.sends=*,2,* a.choose=1,3 a.shutdown b.recvs=*,1 b.rchoose=1,2w b.drain=3",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: both(End{Ring: 2, Frames: 2}), Scripts: [2]sim.Script{
				{Sends: []int{sim.Choose, 2, sim.Choose}, SendChoices: []int{1, 3}, Shutdown: true},
				{Recvs: []sim.RecvOp{{Len: sim.Choose}, {Len: 1}}, RecvChoices: []sim.RecvOp{{Len: 1}, {Len: 2, WaitAll: true}}, DrainLen: 3},
			}},
		},
		{
			text: "mode=dynamic type=stream ring=3 frames=2 maxind=1 advmin=2 a.sends=2 b.recvs=1",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: both(End{Ring: 3, Frames: 2, MaxInd: 1, AdvMin: 2}), Scripts: [2]sim.Script{
				{Sends: []int{2}},
				{Recvs: []sim.RecvOp{{Len: 1}}},
			}},
		},
		{
			text: "mode=dynamic type=stream ring=2 frames=2 a.sends=1,2 a.shutdown a.close b.recvs=1 b.drain=2 b.close",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: both(End{Ring: 2, Frames: 2}), Scripts: [2]sim.Script{
				{Sends: []int{1, 2}, Shutdown: true, Close: true},
				{Recvs: []sim.RecvOp{{Len: 1}}, DrainLen: 2, Close: true},
			}},
		},
		{
			text: "mode=indirect-only type=stream ring=1 frames=1",
			want: Spec{Mode: dynproto.IndirectOnly, Type: dynproto.Stream, Ends: both(End{Ring: 1, Frames: 1})},
		},
		{
			text: "mode=dynamic type=stream a.ring=1 b.ring=3 frames=2 b.ack=2 a.gather=1 hintmin=2 a.noheld seq=-2 phase=-2 a.sends=1 b.recvs=1",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: [2]End{
				{Ring: 1, Frames: 2, Gather: 1, HintMin: 2, NoHeld: true, Seq: 1<<64 - 2, Phase: 1<<32 - 2},
				{Ring: 3, Frames: 2, Ack: 2, HintMin: 2, Seq: 1<<64 - 2, Phase: 1<<32 - 2},
			}, Scripts: [2]sim.Script{{Sends: []int{1}}, {Recvs: []sim.RecvOp{{Len: 1}}}}},
		},
		{
			text: "mode=dynamic type=stream ring=2 frames=2 noheld a.seq=4 b.seq=-9223372036854775808 b.phase=-2147483648",
			want: Spec{Mode: dynproto.Dynamic, Type: dynproto.Stream, Ends: [2]End{
				{Ring: 2, Frames: 2, NoHeld: true, Seq: 4},
				{Ring: 2, Frames: 2, NoHeld: true, Seq: 1 << 63, Phase: 1 << 31},
			}},
		},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.text)
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", tt.text, err)
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("ParseSpec(%q) mismatch (-want +got):\n%s", tt.text, diff)
		}
		if s := got.String(); s != tt.text {
			t.Errorf("String() = %q, want %q", s, tt.text)
		}
	}
}

// both returns the settings of an endpoint for both.
func both(e End) [2]End { return [2]End{e, e} }

// TestParseSpecEnds: a setting for one endpoint overrides the setting for
// both, in either order.
func TestParseSpecEnds(t *testing.T) {
	for _, text := range []string{
		"mode=dynamic type=stream ring=2 b.ring=3 frames=1",
		"mode=dynamic type=stream b.ring=3 ring=2 frames=1",
		"mode=dynamic type=stream a.ring=2 b.ring=3 frames=1",
	} {
		s, err := ParseSpec(text)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ends[0].Ring != 2 || s.Ends[1].Ring != 3 {
			t.Errorf("ParseSpec(%q): rings %d and %d, want 2 and 3", text, s.Ends[0].Ring, s.Ends[1].Ring)
		}
		if got, want := s.String(), "mode=dynamic type=stream a.ring=2 b.ring=3 frames=1"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, text := range []string{
		"",
		"type=stream ring=1 frames=1",
		"mode=dynamic ring=1 frames=1",
		"mode=fast type=stream",
		"mode=dynamic type=stream ring=-1",
		"mode=dynamic type=stream ring=01",
		"mode=dynamic type=stream ring=1 ring=2",
		"mode=dynamic type=stream c.sends=1",
		"mode=dynamic type=stream a.sends=",
		"mode=dynamic type=stream a.sends=1,,2",
		"mode=dynamic type=stream b.recvs=0",
		"mode=dynamic type=stream b.recvs=w",
		"mode=dynamic type=stream a.shutdown=1",
		"mode=dynamic type=stream a.close=1",
		"mode=dynamic type=stream a.colour=red",
		"mode=dynamic type=stream ring=99999999",
		"mode=dynamic type=stream a.choose=1,*",
		"mode=dynamic type=stream b.rchoose=*",
		"mode=dynamic type=stream b.rchoose=0",
		"mode=dynamic type=stream c.ring=1",
		"mode=dynamic type=stream a.ring=1 a.ring=2",
		"mode=dynamic type=stream noheld=1",
		"mode=dynamic type=stream a.ring",
		"mode=dynamic type=stream seq=-0",
		"mode=dynamic type=stream seq=01",
		"mode=dynamic type=stream seq=9223372036854775808",
		"mode=dynamic type=stream phase=2147483648",
		"mode=dynamic type=stream phase=-2147483649",
		"mode=dynamic type=stream seq=-9223372036854775809",
	} {
		if _, err := ParseSpec(text); !errors.Is(err, ErrSpec) {
			t.Errorf("ParseSpec(%q) = %v, want ErrSpec", text, err)
		}
	}
}

func TestTraceText(t *testing.T) {
	spec, err := ParseSpec(defaultConfigs[0].spec)
	if err != nil {
		t.Fatal(err)
	}
	want := &Trace{
		Config: "some-config",
		Spec:   spec,
		Mutant: "mut_something",
		Moves: []sim.Move{
			{End: 0, Kind: sim.MoveSend}, {End: 1, Kind: sim.MoveRecv}, {End: 1, Kind: sim.MoveDeliver},
			{End: 0, Kind: sim.MoveWriteDone}, {End: 1, Kind: sim.MoveCopy}, {End: 1, Kind: sim.MoveDrainRecv},
			{End: 0, Kind: sim.MoveShutdown}, {End: 0, Kind: sim.MoveSend, Chosen: true, Len: 3},
			{End: 1, Kind: sim.MoveRecv, Chosen: true, Len: 2, WaitAll: true}, {End: 1, Kind: sim.MoveRecv, Chosen: true, Len: 1},
			{End: 0, Kind: sim.MoveClose}, {End: 1, Kind: sim.MoveLose}, {End: 1, Kind: sim.MoveWritesDone},
		},
		Comment: "first line\n\n  indented line\n",
	}
	var b bytes.Buffer
	if _, err := want.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	got, err := ParseTrace(&b)
	if err != nil {
		t.Fatalf("ParseTrace: %v\n%s", err, b.String())
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Trace{}, "Comment")); diff != "" {
		t.Errorf("trace round trip mismatch (-want +got):\n%s", diff)
	}
}

func TestParseTraceErrors(t *testing.T) {
	const head = "config c\nspec mode=dynamic type=stream ring=1 frames=1\n"
	for _, text := range []string{
		"",
		"config c\n",
		"spec mode=dynamic type=stream ring=1 frames=1\n",
		head + "config d\n",
		head + "move C:send\n",
		head + "move A:fly\n",
		head + "move A\n",
		head + "move A:send(\n",
		head + "move A:send(2\n",
		head + "move A:send(2w)\n",
		head + "move A:copy(2)\n",
		head + "move B:recv(x)\n",
		head + "move B:recv(70000)\n",
		head + "hello\n",
		"config c\nspec mode=dynamic\n",
		"config a b\nspec mode=dynamic type=stream ring=1 frames=1\n",
	} {
		if _, err := ParseTrace(strings.NewReader(text)); !errors.Is(err, ErrSpec) {
			t.Errorf("ParseTrace(%q) = %v, want ErrSpec", text, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, c := range concatConfigs(defaultConfigs, largeConfigs, deepConfigs, smokeConfigs) {
		f.Add(c.spec)
	}
	f.Add("mode=dynamic type=stream b.recvs=1w,2w")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSpec(text)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not match ErrSpec", err)
			}
			return
		}
		again, err := ParseSpec(s.String())
		if err != nil {
			t.Fatalf("ParseSpec(%q) (from %q): %v", s.String(), text, err)
		}
		if diff := cmp.Diff(s, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip of %q mismatch (-want +got):\n%s", text, diff)
		}
	})
}

func FuzzParseTrace(f *testing.F) {
	f.Add("config c\nspec mode=dynamic type=stream ring=1 frames=1\nmutant m\nmove A:send\nmove B:recv\n")
	f.Add("# comment\n\nconfig c\nspec mode=direct-only type=seqpacket ring=0 frames=1\nmove B:drain-recv\n")
	f.Fuzz(func(t *testing.T, text string) {
		tr, err := ParseTrace(strings.NewReader(text))
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not match ErrSpec", err)
			}
			return
		}
		var b bytes.Buffer
		if _, err := tr.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		again, err := ParseTrace(&b)
		if err != nil {
			t.Fatalf("reparse of %q: %v", b.String(), err)
		}
		if diff := cmp.Diff(tr, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip mismatch (-want +got):\n%s", diff)
		}
	})
}
