package exsnet

import (
	"net"
	"os"

	"github.com/exsgo/exs/exs"
	"go.uber.org/zap"
)

// How a call holds the connection: its count (enter, leave), the side it
// takes (begin, end, lock) and the checks of the closed state and the
// deadline.

// begin starts a call that holds sem (the Read or the Write side): it
// counts the call (enter) and takes sem, waiting as deadline d allows.
// end undoes it.
func (c *Conn) begin(sem chan struct{}, d *deadline) error {
	if err := c.enter(); err != nil {
		return err
	}
	if err := c.lock(sem, d); err != nil {
		c.leave()
		return err
	}
	return nil
}

// end releases sem and the call's count.
func (c *Conn) end(sem chan struct{}) {
	<-sem
	c.leave()
}

// enter counts a call that may use the connection's memory, unless the
// connection is closed.
func (c *Conn) enter() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.users++
	return nil
}

// leave ends what enter began; the last call out after Close frees the
// memory.
func (c *Conn) leave() {
	c.mu.Lock()
	c.users--
	last := c.users == 0 && c.closeDone
	c.mu.Unlock()
	if last {
		c.free()
	}
}

// free releases what newConn made, once no operation and no call uses it.
func (c *Conn) free() {
	if c.r.mh != nil {
		if err := c.st.Mderegister(c.r.mh); err != nil {
			c.log.Error("exsnet: deregister read buffer", zap.Error(err))
			c.mem = nil // still registered: keep the memory
		}
	}
	if c.w.mh != nil {
		if err := c.st.Mderegister(c.w.mh); err != nil {
			c.log.Error("exsnet: deregister write buffer", zap.Error(err))
			c.mem = nil
		}
	}
	if c.mem != nil {
		if err := c.st.Free(c.mem); err != nil {
			c.log.Error("exsnet: free buffers", zap.Error(err))
		}
	}
	for _, q := range []*exs.Queue{c.r.q, c.w.q, c.cq} {
		if q != nil {
			c.st.Qdelete(q)
		}
	}
	c.ref.release()
}

// lock takes a half's semaphore, waiting at most until the deadline or
// Close.
func (c *Conn) lock(sem chan struct{}, d *deadline) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	for {
		ctx := d.wait()
		select {
		case sem <- struct{}{}:
			return nil
		case <-ctx.Done():
			if err := c.check(d); err != nil {
				return err
			}
		}
	}
}

// check returns the error of a call that finds the connection closed or
// its deadline passed.
func (c *Conn) check(d *deadline) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return net.ErrClosed
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	return nil
}
