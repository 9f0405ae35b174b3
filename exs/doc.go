// Package exs is the Extended Sockets API (ES-API, as implemented in C by
// UNH EXS) for Go: register memory once, post asynchronous accept, connect,
// send and recv operations on sockets, and collect their completions from
// event queues. Underneath, a protocol engine (package dynproto) moves the
// bytes of each connection either directly into a recv buffer the receiver
// advertised (one RDMA WRITE, no intermediate copy) or indirectly through a
// stream buffer at the receiver, choosing per transfer; package verbs
// carries the transfers over a provider, such as the in-process one.
//
// # A first program
//
// Everything lives in a Stack: its event queues, memory handles and
// sockets, and the goroutines that serve them.
//
//	st, _ := exs.NewStack()
//	defer st.Close()
//	q, _ := st.Qcreate(64)
//
//	ln, _ := st.Socket(exs.SockStream)
//	ln.Bind("inproc:echo")
//	ln.Listen(0)
//	ln.Accept(q, "accept")            // completes with an EventAccept
//
//	c, _ := st.Socket(exs.SockStream)
//	c.Connect(q, "inproc:echo", "connect")
//	c.Send(q, []byte("hello"), nil, 0, "send")
//
//	var evs [8]exs.Event
//	n, err := q.Dequeue(evs[:], 1, time.Second)
//
// The examples show a complete echo server and client, and a zero-copy
// send from registered memory.
//
// # Operations and events
//
// Accept, Connect, Send, Sendfile, Recv, SendMsg, RecvMsg, Shutdown,
// Close, Cancel, CancelOp and Poll are asynchronous:
// each returns at once, and each one it accepts (the call returns nil)
// posts exactly one Event, to the Queue named in the call, when it
// completes. The Event says which operation (Type), on which Socket, with
// the caller's User value, how many bytes (N), the new socket of an accept
// (Accepted), and the error (Err: nil, or an *OpError whose cause keeps its
// errno, such as ECONNRESET, ECANCELED, EPIPE or EMSGSIZE, testable with
// errors.Is). A call that returns an error posted nothing and will post
// nothing.
//
// Posting never blocks. Each operation reserves room for its event in its
// queue when it is posted, so events are never dropped: a post that finds
// the queue without room (events queued plus events promised), or the
// socket at its limit of outstanding operations (WithOutstanding), fails
// with an error matching ErrWouldBlock and syscall.EAGAIN. Dequeue events,
// then post again: an operation's slot is free before its event can be
// dequeued.
//
// Sends complete in the order they were posted, and so do recvs. A stream
// recv completes with 1 to len(buf) bytes, exactly len(buf) with
// MsgWaitAll, and 0 bytes with Event.EOF set at the end of the stream
// (after the peer's Shutdown and every byte before it). A seqpacket send is
// one message that fills one recv; a message longer than its recv fails
// both with EMSGSIZE; an empty message completes its recv with N 0 and EOF
// not set.
//
// SendMsg and RecvMsg are the vectored Send and Recv (exs_sendmsg and
// exs_recvmsg): several buffers, each with its own memory handle or none,
// as one operation that completes with one EventSendMsg or EventRecvMsg.
// A SendMsg's bytes are gathered by the WRITEs' scatter/gather lists, never
// copied together. An ADVERT names one region: a stream RecvMsg with
// MsgWaitAll advertises each of its buffers, any other RecvMsg into several
// buffers is filled from the stream buffer.
//
// Poll posts a readiness poll (PollIn, PollOut) that completes with one
// EventPoll when a condition holds; it is a notification, not a
// reservation.
// WithOpTimeout makes a send or recv outstanding for too long post one
// EventSendTimeout or EventRecvTimeout (room for it is reserved with the
// operation); the operation stays posted. With WithTimeoutMode(TimeoutEnd)
// it ends instead, with ETIMEDOUT and the bytes it moved, and the
// connection with it.
//
// Sendfile sends a range of an open file as one send (one EventSend): the
// library reads it into registered memory of its own, in chunks pipelined
// with their transfers, so its bytes never pass through the caller's
// memory; a range past the end of the file, or a file truncated meanwhile,
// sends what the file holds, and N tells it.
//
// Sends and recvs may be posted as soon as Connect has been posted: they
// start when the connection is up, and fail with the connect's error if it
// fails.
//
// # Memory
//
// A buffer passed to Send or Recv (or SendMsg or RecvMsg) belongs to the
// library until the operation's event is posted: do not read or write it
// before dequeuing the event.
//
// Register long-lived buffers once with Stack.Mregister and pass the
// handle with each operation on a part of the buffer: operations then cost
// no registration. A handle stays registered until Stack.Mderegister, which
// fails with ErrBusy while operations that name it are outstanding. A nil
// handle is allowed: the library then registers the buffer for that one
// operation and deregisters it when the operation completes, at the cost of
// a registration (a lock, an allocation and key derivation: a few
// microseconds) per operation. Memory from mreg.Alloc is page-aligned and
// outside the Go heap, which suits large registered buffers.
//
// A handle with AccessWrite is registered for remote write, so that the
// peer can place the bytes of a recv directly into it (that is the direct
// transfer). Its remote key reaches the peer only in the ADVERT of a recv
// posted on it, and the protocol lets the peer write only into the recv it
// advertised; but a hostile peer that kept the key could write into the
// handle's memory for as long as it stays registered. Deregister handles
// that hold data a peer must not change once they have served their recvs.
//
// # Sockets and connections
//
// A socket is SockStream (a byte stream) or SockSeqPacket (messages).
// Bind and Listen make a listening socket; each Accept completes with a new
// connected socket that inherits the listening socket's options. Connect
// sets up a connection to a listening socket in the background.
// Addresses are "scheme:name": the scheme picks the provider. Every stack
// knows "inproc", the in-process provider shared by every stack of the
// process, "shm", the same-host provider (package verbs/shm: two processes
// of one Linux host, "shm:PATH" naming the Unix socket the listener binds),
// and "tcp", the provider across hosts (package verbs/tcp: iWARP over TCP,
// "tcp:HOST:PORT"; a socket that listens on port 0 gets a port from the
// system, which its Addr then reports); WithProvider adds others or
// replaces these. An address without a scheme is an "inproc" one.
//
// At connection set-up the two ends exchange their protocol parameters in
// the connection's private data: version, protocol mode, socket type,
// stream buffer (key, address, size) and number of frame buffers. A
// listening socket looks at each request as it arrives, accept posted or
// not, and refuses at once one whose version, mode or type differs from its
// own; the connect then fails with an error matching ErrMismatch (and
// ECONNREFUSED) that names both values, and an accept posted stays posted.
// Matching requests wait for an accept, up to Listen's backlog; one beyond
// it is refused (ECONNREFUSED).
//
// "Connected" means what rdma_cm means by it, not what TCP does: a connect
// completes when the listening application's accept takes the request (the
// connection's resources are set up then), not when the request enters the
// listener's backlog. Nothing waits forever on a peer: a connect that no
// accept takes within its time limit (WithConnectTimeout, 5 seconds by
// default; ConnectContext for one connect) fails with ErrTimedOut
// (ETIMEDOUT).
//
// The protocol mode (WithMode) is ModeDynamic (the default: direct when the
// receiver has advertised a recv, else through the stream buffer),
// ModeDirectOnly or ModeIndirectOnly. Socket.Stats reports, at any time,
// what the engine did: bytes and transfers direct and indirect, ADVERTs,
// phase switches, stalls.
//
// # Ending a connection
//
// Shutdown ends the sending direction in order: earlier sends complete,
// then the peer's recvs see the end of the stream. Close cancels what is
// still outstanding on its own socket (ECANCELED, also matching ErrClosed),
// discards what that socket has received and not yet handed to a recv,
// releases the socket and posts EventClose last. Cancel completes every
// outstanding operation with ECANCELED and ends the connection too, since a
// stream cannot skip bytes. CancelOp cancels one operation, named by its
// user value: an accept alone, but an operation of a connection (connect,
// send, recv, shutdown) only by ending the connection as Cancel does, for
// the same reason. The stream stops at the cancel: a canceled send reports
// in N exactly the bytes of it the peer's recvs get (before their
// ECONNRESET), and the rest is never sent; a canceled recv reports the
// bytes it holds. To count exactly, a cancel lets the transfers already
// in flight finish first, waiting for the provider's confirmation at most a
// second. An operation already complete is not found (ErrNotFound,
// ENOENT). Neither Close nor Cancel ever waits for the peer's
// application.
//
// The close rule, as TCP keeps it: a byte whose send completed is never
// lost because the peer closed. After the peer's Close (or Cancel, or its
// death), a socket's recvs still get every byte (every message) whose send
// completed at the peer, in order, and then:
//   - the end of the stream (N 0, EOF set) if the peer's Shutdown had
//     completed before it closed;
//   - otherwise ECONNRESET, and on a stream a recv that holds bytes
//     completes with them first (a short MsgWaitAll recv).
//
// Every later recv completes the same way. Sends and shutdowns not yet
// complete fail with ECONNRESET, and so do later sends.
//
// A peer that vanishes without a word (its host lost power or its network,
// a firewall drops everything) is found by its silence: over "tcp" a
// connection whose peer leaves data unacknowledged, or keepalive probes
// unanswered, for the provider's peer timeout (30 seconds by default) is
// taken as gone, and the rule above applies with ETIMEDOUT instead of
// ECONNRESET: the recvs get what arrived, then an error matching
// ErrPeerTimedOut and syscall.ETIMEDOUT, and so do the sends not yet
// complete.
// To set the timeout, or turn it off (0), give the stack a provider of
// your own:
//
//	st, err := exs.NewStack(exs.WithProvider("tcp", tcp.New(tcp.WithPeerTimeout(10*time.Second))))
//
// (close it with tcp.Provider.Close once its stacks are closed). Only the socket's
// own Close or Cancel discards what it has not received. The orderly end of
// a connection is therefore: each side shuts down after its last send, and
// closes once its recvs have seen the peer's end of stream (and its own
// sends and shutdown have completed).
//
// # Queues
//
// Stack.Qcreate makes a queue of a given depth. Dequeue takes at least min
// events with a timeout, DequeueContext with a context, TryDequeue without
// waiting. WithWaitMode chooses how a waiting Dequeue waits: spin then
// block (WaitAdaptive, the default), spin only (WaitBusyPoll) or block
// (WaitNotify). Stack.Qdelete refuses with ErrBusy while operations that
// will post to the queue are outstanding, so that no event is lost; events
// already queued stay dequeuable after the delete, then Dequeue returns
// ErrClosed.
//
// Cap and Len read a queue's depth and the events queued, Outstanding the
// operations whose events are still to come. To wait on several queues,
// or on a queue and other I/O, at once, use a queue's signal: the channel
// of Queue.Signal (for a select) or the descriptor of Queue.SignalFD (an
// eventfd, for poll and epoll loops) is ready while events are queued and
// cleared by the dequeue that empties the queue. Neither starts a
// goroutine; Qdelete closes the descriptor.
//
// # Goroutines
//
// A stack runs one goroutine per listening socket and one per connected
// (or connecting) socket: the progress engine, which hands posted
// operations to the protocol engine, carries out its transfers, takes the
// provider's completions and posts events. It allocates nothing per
// message, and sleeps when it has nothing to do (after spinning briefly
// in WaitAdaptive mode); posting an operation wakes it with a channel send
// only if it sleeps. Each goroutine ends when its socket is closed;
// Stack.Close closes every socket and waits for every goroutine.
//
// # Errors
//
// Calls return, and events carry, an *OpError (like net.OpError) whose
// cause wraps one of the package's sentinels or an errno: test with
// errors.Is, never by comparing strings. Every error caused by something
// being closed matches ErrClosed, which is the same value as
// eventq.ErrClosed and verbs.ErrClosed.
//
// # Logging
//
// WithLogger takes a *zap.Logger (zap.NewNop() by default); the package
// logs connection events only, never per operation, and never to a global
// logger.
package exs
