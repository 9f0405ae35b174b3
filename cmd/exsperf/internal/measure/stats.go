package measure

import (
	"fmt"
	"io"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/shm"
)

// statsEnv, when set, makes an exs-shm stream print the sender's socket
// statistics over the measured interval, and its provider's connection
// statistics, on stderr: the ADVERTs, stalls, ACKs and wake-ups behind a
// figure.
const statsEnv = "EXSPERF_STATS"

// printStats prints the difference of two socket statistics and the
// provider's connection statistics.
func printStats(w io.Writer, what string, s0, s1 exs.Stats, conns []shm.ConnStats) {
	d := func(a, b uint64) uint64 { return b - a }
	fmt.Fprintf(w, "%s: sends %d, direct %d, indirect %d transfers; adverts used %d, discarded %d; credit stalls %d, frame stalls %d, held pauses %d; acks %d, credit frames %d; progress wake-ups %d\n",
		what, d(s0.Sends, s1.Sends), d(s0.TransfersDirect, s1.TransfersDirect), d(s0.TransfersIndirect, s1.TransfersIndirect),
		d(s0.AdvertsUsed, s1.AdvertsUsed), d(s0.AdvertsDiscarded, s1.AdvertsDiscarded),
		d(s0.CreditStalls, s1.CreditStalls), d(s0.FrameStalls, s1.FrameStalls), d(s0.HeldPauses, s1.HeldPauses),
		d(s0.AcksSent, s1.AcksSent), d(s0.CreditFrames, s1.CreditFrames), d(s0.Wakeups, s1.Wakeups))
	for _, c := range conns {
		fmt.Fprintf(w, "  shm connection %d: %d copies by process_vm_writev/readv, %d by copy() into shared memory, %d ring messages (%d inline), %d target copies, %d receiver sleeps\n",
			c.QPNum, c.Direct, c.Shared, c.RingMessages, c.Inline, c.TargetCopies, c.Sleeps)
	}
}
