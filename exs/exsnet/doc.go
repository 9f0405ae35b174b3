// Package exsnet adapts exs to the net package's interfaces: Dial returns
// a net.Conn and Listen a net.Listener whose bytes travel over exs, through
// any of its providers ("inproc:NAME" in one process, "shm:PATH" between
// the processes of one host), so that code written for net.Conn (net/http,
// crypto/tls, io.Copy) runs over it unchanged, as gVisor's gonet adapts
// its network stack.
//
//	ln, err := exsnet.Listen("shm:/run/app.sock")
//	...
//	go http.Serve(ln, handler)
//
//	c, err := exsnet.Dial(ctx, "shm:/run/app.sock")
//
// # Memory and copies
//
// Each connection registers its memory once, when it is made: a read
// buffer (WithReadBuffer), cut into four recvs that stay posted, so that
// the peer writes what it sends directly into them (exs's direct
// transfers), and a write buffer (WithWriteBuffer). Read copies out of the
// read buffer; WriteTo (io.WriterTo, which io.Copy prefers) hands the read
// buffer to its writer instead. Write copies into the write buffer and
// returns while the bytes are on their way, blocking only while the
// buffer is full; ReadFrom (io.ReaderFrom) reads its source into the write
// buffer instead. In steady state no call registers or allocates memory.
//
// # Deadlines
//
// SetDeadline, SetReadDeadline and SetWriteDeadline apply to pending calls
// too. A call past its deadline fails with a *net.OpError whose Timeout
// reports true and that matches os.ErrDeadlineExceeded. A deadline never
// cancels an exs operation, since canceling one ends an exs connection (a
// stream cannot skip bytes): a Read that times out leaves its recvs posted
// and the bytes they receive go to the next Read; a Write that times out
// has taken the bytes it counts, and they still reach the peer.
//
// # Ending a connection
//
// CloseWrite ends the sending direction (exs's Shutdown): the peer's Reads
// return io.EOF after every byte written before it. Close ends both: it
// makes pending Reads and Writes return an error matching net.ErrClosed
// at once, and then, as TCP does, lets the bytes already written reach the
// peer, followed by the end of the stream, waiting while they make
// progress; if none reaches the peer for the linger time (WithLinger), or
// if bytes that arrived were left unread, it resets the connection (the
// peer's Reads then fail with an error matching syscall.ECONNRESET after
// the bytes that did arrive). A peer that stops answering (over "tcp",
// the provider's peer timeout, 30 seconds by default) ends the connection
// too: Reads return the bytes that arrived, then, as a TCP connection's
// after its user timeout, an error matching syscall.ETIMEDOUT whose
// Timeout reports true but that is no deadline's (it does not match
// os.ErrDeadlineExceeded). The memory of a connection is released once
// Close is done and no call uses it any more.
//
// # Stacks and goroutines
//
// Dial makes an exs stack for its connection and Listen one for the
// listener and its connections, closed with the last of them; WithStack
// shares a stack of the caller's. The package keeps no goroutine of its
// own: Read and Write wait on their connection's exs queues in the calling
// goroutine, a deadline's timer only wakes them, and the stack's
// goroutines end with its sockets.
//
// # Errors
//
// Errors are *net.OpError values with Net "exs" whose Err is the cause
// that exs reported, keeping its errno (test with errors.Is: for example
// syscall.ECONNRESET, syscall.ECONNREFUSED); every error of a closed
// connection or listener matches net.ErrClosed. Read returns io.EOF
// itself at the end of the stream.
//
// # Logging
//
// WithLogger takes a *zap.Logger (zap.NewNop() by default) for connection
// events: dials, accepts, closes that reset. Nothing is logged per Read
// or Write.
package exsnet
