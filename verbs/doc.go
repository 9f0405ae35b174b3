// Package verbs is a software RDMA verbs layer: protection domains, memory
// regions, completion queues and reliable-connected queue pairs with the
// semantics of hardware verbs (ordering, keys, access rights, error
// states), over pluggable providers that move the bytes.
//
// # Objects
//
// Open a Device over a Provider (package inproc connects queue pairs of
// one process). In it, allocate a protection domain (PD) and register
// memory (PD.RegisterMR): a memory region (MR) has an lkey for local work
// requests and an rkey that a peer uses to RDMA WRITE into it or READ from
// it, if the region grants mreg.RemoteWrite or mreg.RemoteRead. Create
// completion queues (Device.CreateCQ) and queue pairs (PD.CreateQP).
//
//	dev, _ := verbs.Open(inproc.New())
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(256, verbs.CQOptions{})
//	qp, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
//	buf := make([]byte, 1<<20)
//	mr, _ := pd.RegisterMR(buf, mreg.LocalWrite|mreg.RemoteWrite)
//
// # Connections
//
// One side listens (Device.Listen, Listener.Accept) and accepts a
// ConnRequest with a queue pair; the other calls QP.Connect. Requests,
// accepts and rejects carry up to MaxPrivateData bytes of private data, as
// rdma_cm does. QP.Disconnect ends a connection; QP.Done and QP.Err tell
// that it ended, and why.
//
// # Work requests and completions
//
// QP.PostSend posts SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM
// and RDMA_READ work requests with scatter/gather lists of SGEs (address,
// length, lkey); QP.PostRecv posts RECVs. Posting never blocks: a post
// beyond a queue's depth, or one whose completion would not fit in the
// completion queue, fails with ErrQueueFull (which also satisfies
// errors.Is(err, syscall.EAGAIN)). Each work request completes exactly
// once, with a WC on the completion queue: signaled send work requests and
// every RECV always, unsignaled ones only when they fail or are flushed.
// Poll a completion queue (CQ.Poll), wait on it (CQ.Wait), or ask for a
// notification (CQ.RequestNotify, CQ.Notify).
//
// # Guarantees
//
//   - Completions of each work queue (a send queue, a receive queue)
//     appear in the order the work requests were posted.
//   - Messages are placed at the peer in the order they were posted. In
//     particular a SEND, or an RDMA_WRITE_WITH_IMM, is delivered (its RECV
//     completes) only after every earlier RDMA WRITE of the queue pair has
//     been placed: a notification after data needs no fence. A queue pair
//     created with QPConfig.RelaxedWritePlacement lets an RDMA WRITE be
//     placed before the SENDs posted ahead of it are delivered (see
//     there); the rest holds.
//   - Every incoming RDMA WRITE or READ is checked against the target's
//     registration table (live rkey, range inside the region without
//     wrap-around, the right) before memory is touched. A violation moves
//     both queue pairs to the Error state (as an iWARP TERMINATE would)
//     and completes the initiator's work request with
//     StatusRemoteAccessError.
//   - Entering the Error state, by Disconnect, Close, an error of either
//     end, or the peer's disconnect, flushes every outstanding work
//     request of both queues with StatusFlushed.
//   - A SEND longer than the RECV it meets fails: StatusLocalLengthError at
//     the receiver, StatusRemoteInvalidRequest at the sender; nothing is
//     placed.
//   - A SEND meeting no RECV waits for one (RNRWait, the default) or fails
//     with StatusRNRRetryExceeded (RNRFail); see RNRPolicy.
//
// # Concurrency
//
// Every type is safe for concurrent use unless its documentation says
// otherwise. No goroutine is started by this package: work runs in the
// goroutine that posts, or in whichever goroutine finds it runnable next
// (for the in-process provider, the peer's goroutine that posts the RECV a
// waiting SEND needed). Providers may own goroutines of their own.
//
// # Providers
//
// A Provider only sets up connections and carries Messages; the rules
// above live here, behind Endpoint, so that every provider shares them.
// See Provider, Link and Endpoint for the contract, docs/verbs.md for a
// guide to writing a provider, and package verbstest for the conformance
// suite every provider must pass.
package verbs
