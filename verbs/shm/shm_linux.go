package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/exsgo/exs/mreg"
	"github.com/exsgo/exs/verbs"
)

// Compile-time checks that the provider implements the verbs interfaces.
var (
	_ verbs.Provider             = (*Provider)(nil)
	_ verbs.RegistrationObserver = (*Provider)(nil)
	_ verbs.LinkListener         = (*listener)(nil)
	_ verbs.LinkRequest          = (*request)(nil)
)

// Provider is the same-host provider. It is safe for concurrent use. New
// returns one; it holds the registrations it publishes and its
// connections, and needs no closing (connections end with their queue
// pairs, listeners with Close).
type Provider struct {
	opts  options
	probe *[2]uint64 // the word peers read to check cross-memory attach

	// mu guards the maps below and each link's pmu.
	mu        sync.Mutex
	pds       map[*verbs.PD]*pdState
	links     map[*link]struct{}
	arenas    map[uintptr]*arena // the shared allocator's, by first byte
	nextArena uint32
}

// pdState is what the provider knows of a protection domain: its live
// registrations and the connections that publish them.
type pdState struct {
	regions map[*verbs.MR]pubRegion
	links   map[*link]struct{}
}

// pubRegion is a published registration and the arena it lies in, if any.
type pubRegion struct {
	info  verbs.RegionInfo
	arena *arena
}

// New returns a provider configured by opts. It fails with an error
// wrapping verbs.ErrInvalid if an option's value is out of range; without
// options it never fails.
func New(opts ...Option) (*Provider, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	p := &Provider{opts: o, probe: new([2]uint64), pds: make(map[*verbs.PD]*pdState), links: make(map[*link]struct{}),
		arenas: make(map[uintptr]*arena)}
	var b [8]byte
	rand.Read(b[:])
	p.probe[0] = binary.LittleEndian.Uint64(b[:]) | 1
	return p, nil
}

// parse returns the socket path of an "shm:PATH" address.
func parse(addr string) (string, error) {
	path, ok := strings.CutPrefix(addr, Scheme)
	if !ok || path == "" {
		return "", fmt.Errorf("%w: address %q is not %sPATH", verbs.ErrInvalid, addr, Scheme)
	}
	return path, nil
}

// Stats returns the statistics of the provider's live connections.
func (p *Provider) Stats() []ConnStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ConnStats, 0, len(p.links))
	for l := range p.links {
		l.tx.Lock()
		arenas := len(l.tx.peerArenas)
		l.tx.Unlock()
		out = append(out, ConnStats{
			PeerArenas: arenas,
			QPNum:      l.ep.QPNum(), PeerPID: l.peerPID, CMA: l.cma, CMAError: l.cmaErr,
			Direct: l.st.direct.Load(), RingMessages: l.st.ringMsgs.Load(), Inline: l.st.inline.Load(),
			TargetCopies: l.st.pulls.Load(), Sleeps: l.st.wakes.Load(), Shared: l.st.shared.Load(),
		})
	}
	return out
}

// MemoryRegistered publishes a new registration to the connections of its
// protection domain.
func (p *Provider) MemoryRegistered(pd *verbs.PD, mr *verbs.MR) {
	info := mr.Info()
	var flush, redo []*link
	p.mu.Lock()
	st := p.pdState(pd)
	pr := pubRegion{info: info, arena: p.arenaOf(info.Addr, info.Len)}
	if pr.arena != nil {
		pr.arena.regs++
	}
	st.regions[mr] = pr
	for l := range st.links {
		if l.queueArena(pr.shareable()) {
			flush = append(flush, l)
		}
		if !l.publish(pr) && l.acquire() {
			redo = append(redo, l)
		}
	}
	p.mu.Unlock()
	// The socket writes and the waits, without p.mu: a peer that stalls
	// them stalls no other connection.
	for _, l := range flush {
		l.flushArenaMsgs()
	}
	for _, l := range redo {
		l.waitAccess()
		p.mu.Lock()
		if st := p.pds[pd]; st != nil {
			if _, ok := st.links[l]; ok {
				if pr, ok := st.regions[mr]; ok {
					l.write(pr)
				}
			}
		}
		p.mu.Unlock()
		l.release()
	}
}

// shareable returns the arena to hand the peers for the region: its arena
// if the region allows remote access, else nil. A peer that maps an arena
// can write any byte of it, so an arena holding only local registrations
// (send buffers, say) is never handed out.
func (pr pubRegion) shareable() *arena {
	if pr.info.Access&(mreg.RemoteRead|mreg.RemoteWrite) == 0 {
		return nil
	}
	return pr.arena
}

// MemoryDeregistered withdraws a registration and waits until no peer
// copies into it any more.
func (p *Provider) MemoryDeregistered(pd *verbs.PD, mr *verbs.MR) {
	info := mr.Info()
	var wait []*link
	p.mu.Lock()
	if st := p.pds[pd]; st != nil {
		if pr, ok := st.regions[mr]; ok && pr.arena != nil {
			pr.arena.regs--
		}
		delete(st.regions, mr)
		for l := range st.links {
			// The entry is live, or was withdrawn by a publish
			// that found its slot reused and has not yet waited
			// for the peer's copies (see MemoryRegistered): wait
			// for them either way.
			e := &l.mine[slotOf(info.RKey)]
			if e.rkey.Load() == uint32(info.RKey) {
				e.state.Store(0)
				if l.acquire() {
					wait = append(wait, l)
				}
			}
		}
		p.dropIfUnused(pd, st)
	}
	p.mu.Unlock()
	for _, l := range wait {
		l.waitAccess()
		l.release()
	}
}

// pdState returns the state of pd, creating it. Called with mu held.
func (p *Provider) pdState(pd *verbs.PD) *pdState {
	st := p.pds[pd]
	if st == nil {
		st = &pdState{regions: make(map[*verbs.MR]pubRegion), links: make(map[*link]struct{})}
		p.pds[pd] = st
	}
	return st
}

func (p *Provider) dropIfUnused(pd *verbs.PD, st *pdState) {
	if len(st.regions) == 0 && len(st.links) == 0 {
		delete(p.pds, pd)
	}
}

// publish writes a registration into the link's table and reports true;
// or, if the slot still holds a live region, withdraws that one and
// reports false. The slot's previous region was then deregistered and its
// slot reused before we heard of the deregistration: the caller waits for
// the peer's copies into it to end (waitAccess), without p.mu, and then
// writes the new one. Called with p.mu held.
func (l *link) publish(pr pubRegion) bool {
	e := &l.mine[slotOf(pr.info.RKey)]
	if e.state.Load() == entryLive {
		e.state.Store(0)
		return false
	}
	l.write(pr)
	return true
}

// write writes a registration into the link's table, whatever the slot
// held. Called with p.mu held.
func (l *link) write(pr pubRegion) {
	ri := pr.info
	e := &l.mine[slotOf(ri.RKey)]
	e.state.Store(0)
	e.lkey.Store(uint32(ri.LKey))
	e.rkey.Store(uint32(ri.RKey))
	e.access.Store(uint32(ri.Access))
	e.addr.Store(ri.Addr)
	e.n.Store(ri.Len)
	e.arena.Store(0)
	e.arenaOff.Store(0)
	if a := pr.arena; a != nil {
		e.arena.Store(a.id)
		e.arenaOff.Store(ri.Addr - uint64(a.base))
	}
	e.state.Store(entryLive)
}

// addLink records a connection and publishes its protection domain's
// registrations in its table. Nothing was published in that table before,
// so there is no peer's copy to wait for: what the slots hold (only what a
// peer may have written into the mapping it created) is overwritten.
func (p *Provider) addLink(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links[l] = struct{}{}
	st := p.pdState(l.pd)
	st.links[l] = struct{}{}
	for _, pr := range st.regions {
		l.write(pr)
	}
}

// sendArenas hands the peer the arenas of the published registrations,
// once the handshake is over, and from then on with each registration.
func (p *Provider) sendArenas(l *link) {
	p.mu.Lock()
	l.pmu.started = true
	if st := p.pds[l.pd]; st != nil {
		for _, pr := range st.regions {
			l.queueArena(pr.shareable())
		}
	}
	p.mu.Unlock()
	l.flushArenaMsgs()
}

// removeLink forgets a connection.
func (p *Provider) removeLink(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
	if st := p.pds[l.pd]; st != nil {
		delete(st.links, l)
		p.dropIfUnused(l.pd, st)
	}
}
