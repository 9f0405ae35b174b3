//go:build !linux

package tcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/exsgo/exs/verbs"
)

// errUnsupported reports that the provider needs Linux.
var errUnsupported = errors.New("tcp: the TCP provider needs Linux")

// Provider is the TCP provider. Outside Linux it cannot connect: Listen
// and Dial fail.
type Provider struct{}

// New returns a provider.
func New(opts ...Option) *Provider {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	return &Provider{}
}

// Listen fails: the provider needs Linux.
func (p *Provider) Listen(addr string) (verbs.LinkListener, error) {
	return nil, fmt.Errorf("%w: listen %s", errUnsupported, addr)
}

// Dial fails: the provider needs Linux.
func (p *Provider) Dial(ctx context.Context, addr string, ep *verbs.Endpoint, private []byte) (verbs.Link, []byte, error) {
	return nil, nil, fmt.Errorf("%w: dial %s", errUnsupported, addr)
}

// Close does nothing.
func (p *Provider) Close() error { return nil }
