package exsnet

import (
	"sync"

	"github.com/exsgo/exs/exs"
)

// stackRef counts the users of a stack: a listener and its connections,
// or one dialed connection. A stack the package made is closed when the
// last user releases it; one the caller gave (WithStack) never is.
type stackRef struct {
	st    *exs.Stack
	owned bool

	mu sync.Mutex
	n  int
}

// newStackRef returns a reference held once, to cfg's stack or to a new
// one.
func newStackRef(cfg *config) (*stackRef, error) {
	if cfg.stack != nil {
		return &stackRef{st: cfg.stack, n: 1}, nil
	}
	st, err := exs.NewStack()
	if err != nil {
		return nil, err
	}
	return &stackRef{st: st, owned: true, n: 1}, nil
}

func (r *stackRef) acquire() {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *stackRef) release() {
	r.mu.Lock()
	r.n--
	last := r.n == 0
	r.mu.Unlock()
	if last && r.owned {
		r.st.Close()
	}
}
