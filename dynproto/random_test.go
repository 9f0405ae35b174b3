package dynproto_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/exsgo/exs/dynproto"
	"github.com/exsgo/exs/internal/dynproto/sim"
)

// randomConfig draws a world: engine settings shared by both ends, and a
// script for each end (both directions carry data).
func randomConfig(rng *rand.Rand, mode dynproto.Mode, typ dynproto.SockType, waitAll bool) *sim.Config {
	ring := [2]int{1 + rng.IntN(64), 1 + rng.IntN(64)}
	frames := [2]int{1 + rng.IntN(6), 1 + rng.IntN(6)}
	var cfg sim.Config
	for i := range 2 {
		cfg.Engine[i] = dynproto.Config{
			Mode: mode, Type: typ,
			RecvBuffer: ring[i], PeerRecvBuffer: ring[1-i],
			Frames: frames[i], PeerFrames: frames[1-i],
			MaxGather: 1 + rng.IntN(4),
		}
		if rng.IntN(2) == 0 {
			cfg.Engine[i].AckThreshold = 1 + rng.IntN(ring[i])
		}
		// Departure 11 for some sends and recvs and not others (0: the
		// default); not drawn from rng, so that the scripts stay the same.
		cfg.Engine[i].HintMin = (7*ring[i] + ring[1-i]) % 24
		// Departure 12 and the cap on indirect transfers, likewise for
		// some connections and not others.
		cfg.Engine[i].AdvertMin = (5*ring[i] + 3*ring[1-i]) % 40
		cfg.Engine[i].MaxIndirect = (3*ring[i] + 11*ring[1-i]) % 17
	}
	for i := range 2 {
		var s sim.Script
		maxLen := 1 + rng.IntN(100)
		for range rng.IntN(12) {
			n := rng.IntN(maxLen + 1)
			if typ == dynproto.Stream && n == 0 && rng.IntN(2) == 0 {
				n = 1
			}
			s.Sends = append(s.Sends, n)
		}
		s.Shutdown = true
		for range rng.IntN(12) {
			s.Recvs = append(s.Recvs, sim.RecvOp{Len: 1 + rng.IntN(maxLen+20), WaitAll: waitAll && rng.IntN(3) > 0})
		}
		s.DrainLen = maxLen + 1 // big enough for any message
		// The ending, in some worlds: this end's application may close
		// at any point (not drawn from rng, so that the scripts stay the
		// same).
		s.Close = (13*ring[i]+7*ring[1-i]+5*i)%6 == 0
		cfg.Scripts[i] = s
	}
	return &cfg
}

// runRandom drives w by picking among enabled moves with rng until it is
// quiescent, and checks that it finished well.
func runRandom(t *testing.T, w *sim.World, pick func(n int) int, log *strings.Builder) {
	t.Helper()
	var moves []sim.Move
	for steps := 0; ; steps++ {
		moves = w.Moves(moves[:0])
		if len(moves) == 0 {
			break
		}
		if steps > 200000 {
			t.Fatalf("no end after %d steps", steps)
		}
		m := moves[pick(len(moves))]
		if log != nil {
			fmt.Fprintf(log, "%v\n", m)
		}
		if err := w.Step(m); err != nil {
			t.Fatalf("step %d (%v): %v\n%s", steps, m, err, w.Describe())
		}
	}
	if err := w.Finished(); err != nil {
		t.Fatalf("quiescent but not finished: %v\n%s", err, w.Describe())
	}
}

var (
	allModes = []dynproto.Mode{dynproto.Dynamic, dynproto.DirectOnly, dynproto.IndirectOnly}
	allTypes = []dynproto.SockType{dynproto.Stream, dynproto.SeqPacket}
)

func TestRandomWorlds(t *testing.T) {
	seeds := 500
	if testing.Short() {
		seeds = 40
	}
	for _, mode := range allModes {
		for _, typ := range allTypes {
			// In seqpacket mode the engine ignores MSG_WAITALL (a message
			// fills one recv whole anyway); those worlds check that it does.
			for _, waitAll := range []bool{false, true} {
				for seed := uint64(1); seed <= uint64(seeds); seed++ {
					name := fmt.Sprintf("%v/%v/waitall=%v/seed=%d", mode, typ, waitAll, seed)
					t.Run(name, func(t *testing.T) {
						rng := rand.New(rand.NewPCG(seed, 0x5eed))
						cfg := randomConfig(rng, mode, typ, waitAll)
						w, err := sim.New(cfg)
						if err != nil {
							t.Fatal(err)
						}
						var log strings.Builder
						w.Trace = func(s string) { log.WriteString(s + "\n") }
						defer func() {
							if t.Failed() {
								t.Logf("config %+v\ntrace:\n%s", *cfg, tail(log.String(), 400))
							}
						}()
						runRandom(t, w, rng.IntN, nil)
					})
				}
			}
		}
	}
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
