//go:build !linux

package shm

import (
	"context"
	"errors"
	"fmt"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// errUnsupported reports that the provider needs Linux.
var errUnsupported = errors.New("shm: the same-host provider needs Linux")

// Provider is the same-host provider. Outside Linux it cannot connect:
// Listen and Dial fail.
type Provider struct{}

// New returns a provider. It fails with an error wrapping
// verbs.ErrInvalid if an option's value is out of range; without options
// it never fails.
func New(opts ...Option) (*Provider, error) {
	if _, err := newOptions(opts); err != nil {
		return nil, err
	}
	return &Provider{}, nil
}

// Listen fails: the provider needs Linux.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	return nil, fmt.Errorf("%w: listen %s", errUnsupported, addr)
}

// Dial fails: the provider needs Linux.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	return nil, nil, fmt.Errorf("%w: dial %s", errUnsupported, addr)
}

// Stats returns nothing: there are no connections.
func (p *Provider) Stats() []ConnStats { return nil }

var _ verbs.Provider = (*Provider)(nil)

// Alloc fails: the shared allocator needs Linux.
func (p *Provider) Alloc(n int) ([]byte, error) {
	return nil, fmt.Errorf("%w: allocate %d bytes", errUnsupported, n)
}

// Free fails with an error wrapping mreg.ErrInvalid: nothing was
// allocated, so b is not memory from Alloc (callers such as exs.Stack.Free
// then try the allocator the memory came from).
func (p *Provider) Free(b []byte) error {
	return fmt.Errorf("%w: free memory not from Alloc: %w", errUnsupported, mreg.ErrInvalid)
}
