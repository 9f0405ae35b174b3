// Package dynproto is the protocol engine of exs: one end of a connection
// running the dynamic protocol of MacArthur and Russell, "An Efficient Method
// for Stream Semantics over RDMA" (IPDPS 2014).
//
// A byte stream (SOCK_STREAM) or a sequence of messages (SOCK_SEQPACKET) is
// moved either directly, by an RDMA WRITE into a recv buffer the receiver
// advertised, or indirectly, by an RDMA WRITE into the stream buffer, a ring
// at the receiver from which it copies into its recvs. The sender chooses per
// transfer: directly when it holds a fresh ADVERT, indirectly otherwise.
// Sequence numbers and phase numbers tell a fresh ADVERT from a stale one,
// whose recv the stream buffer is already filling. Mode selects the dynamic
// protocol or one of the paper's two baselines (direct-only, indirect-only).
// docs/protocol.md states the protocol exactly as this package runs it, with
// the wire format and every departure from the slides, and why.
//
// # Inputs and actions
//
// Each input is a method call: the application posts a send (PostSend, or
// QueueSend then Pump) or a recv (PostRecv, or PostRecvUnadvertised for a
// recv no ADVERT can name), a frame arrives (OnFrame), the
// oldest outstanding write completes (WriteDone, or WritesDone for several,
// such as a transfer's writes, with one Pump), the caller copies out of
// the stream buffer (Copy), this end shuts down its stream (Shutdown), closes
// or cancels (Abort), or the connection goes under it (PeerGone). Each method
// appends the Actions it decides on to the caller's slice: WRITEs to carry
// out (WriteDirect, WriteIndirect), frames to send (SendFrame), copies out of
// the stream buffer (CopyOut), completions (SendDone, RecvDone). The caller
// carries them out in order.
//
// The engine is pure: it performs no I/O, starts no goroutines, reads no
// clock and logs nothing, so that exs drives it over verbs and the model
// checker in proofs drives the very same code through every interleaving of
// small configurations. A caller that reuses its action slice allocates
// nothing per operation in steady state.
//
// # Where the algorithms are
//
// The paper's four algorithms (as docs/protocol.md restates them), which the
// comments name by number:
//
//   - Algorithm 1 (S: choose a transfer for the next bytes): sender.go,
//     pumpSends, with freshAdvert and stale (step 1, a fresh ADVERT: direct),
//     indirect (step 2, the stream buffer), direct, gather and write.
//   - Algorithm 2 (R: may an ADVERT be sent): receiver.go, pumpAdverts and
//     holdOff.
//   - Algorithm 3 (R: a transfer arrives): receiver.go, onDirect and
//     onIndirect.
//   - Algorithm 4 (R: copy out of the stream buffer): receiver.go, Copy,
//     copyStream and copyMessages; the ACKs that return the space are in
//     credits.go.
//
// The files: types.go holds the public types (Mode, SockType, Config, Kind,
// Action, Stats, the errors); engine.go the Engine, which embeds the state of
// each part (sender, receiver, frameCredits), and what spans both halves
// (New, Pump, OnFrame, Abort); sender.go the sender half; receiver.go the
// receiver half and the ending (onFin, PeerGone); credits.go flow control
// (frame credits, CREDIT frames, ACKs, byte credits); frame.go the wire
// format; seq.go sequence and phase numbers; state.go the State snapshot.
//
// # Where the departures are
//
// docs/protocol.md numbers the places where the engine departs from the
// slides; the comments name them where the code implements them:
//
//  1. S'_r for recvs never advertised: estimateCopied.
//  2. Held recvs are advertised once the hold-off ends: pumpAdverts,
//     waitsUnadvertised, keepsOrder.
//  3. ADVERTs are judged when there is data to send: onAdvert only queues,
//     freshAdvert judges.
//  4. Coalescing: gather, QueueSend.
//  5. WAITALL ADVERTs: pumpAdverts (the flag), direct (filled in full).
//  6. Message mode: direct, indirect, onAck, copyMessages.
//  7. Frame flow control: credits.go (frameCredits, canFrame, frame,
//     creditDue, sendCredit, onAnyFrame).
//  8. Byte credits, AckThreshold, MaxIndirect: pumpAck, onAck,
//     indirectRoom.
//  9. The receiver checks every frame: OnFrame, onAnyFrame and each on*
//     method.
//  10. Shutdown, abort and the close rule: Shutdown, finDue, sendFin, onFin,
//     finishAtEOF, Abort, PeerGone, finishGone.
//  11. The held-recv hint, PAUSE and RESUME: holding and hint (FlagHeld),
//     pauseForHeld and pause (PAUSE), onPause, pumpResume and resumeDue
//     (RESUME), onAck; the one ADVERT that opens a direct phase
//     (pumpAdverts, probing).
//  12. Small recvs are not advertised: tooSmallToAdvert, keepsOrder,
//     advertisedOnceDrained.
//
// # Mutants
//
// proofs shows that each rule is needed by compiling a deliberate fault
// into this package, one per build tag (go test -tags mut_nophasejump ...):
// the boolean constants of dynproto/internal/mut, false in every normal build,
// so that the compiler removes the faulty branches and the engine that runs
// in production is the one the checker explores. Each constant is read
// inside a small function named for the rule it breaks (holdOff, stale,
// jumpPast, indirectRoom, keepsOrder, needsData, ...), so that the algorithms
// read without them; only the two of the close rule, which replace a whole
// behaviour, are tested at the top of PeerGone and finishGone.
//
// # What the model checker needs
//
// Copying an engine to branch, encoding its state canonically and naming
// the mutant compiled in are needed by this module's simulator
// (internal/dynproto/sim) and model checker (proofs) only, and are not
// exported: this package's init registers them with the module's
// internal/dynproto/hook, which no other module can import.
package dynproto
