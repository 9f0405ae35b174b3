package usertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exsgo/exs/exs"
	"github.com/exsgo/exs/verbs/faults"
	"github.com/exsgo/exs/verbs/shm"
)

// The harness's same-host share: one seed in shmShare (drawn from the
// seed) runs over the same-host provider between two processes. This
// process runs the connecting side of each connection; a child process (one
// for the whole run, serving its seeds at once) runs the accepting side.
// Each process wraps its own same-host provider with package verbs/faults
// and applies the fault schedules of its ends of the connections (the
// plan is drawn from the seed on both sides); the registration the plan
// refuses is refused here only. The child sends back what its sides did and
// saw, and which of its ends the schedule dropped or refused a post at, and
// the connections are judged here by the same rules as the in-process
// seeds. The child checks at its end that its goroutines and descriptors
// came back to their level before its first seed.
// EXS_SHM_SHARE sets another share (1: every seed, 0: none).
var shmShare = shareOf("EXS_SHM_SHARE")

// shmSeed reports whether seed runs between processes.
func shmSeed(seed uint64) bool { return shmShare > 0 && mix(seed^0x5eed5)%shmShare == 0 }

// shmAddrs returns the same-host addresses of a seed's connections, in dir.
func shmAddrs(dir string, seed uint64, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("shm:%s/s%d-c%d", dir, seed, i)
	}
	return addrs
}

// schedPeer is the child process that runs the accepting sides of the
// seeds between processes.
type schedPeer struct {
	c   *childProcess
	dir string

	mu      sync.Mutex // orders writes to the child's stdin, and guards waiting
	waiting map[uint64]chan string
	gone    bool // the child's output ended
}

// startSchedPeer starts the child; it is stopped at the end of the test.
func startSchedPeer(t *testing.T) *schedPeer {
	c, _ := startChild(t, "sched", nil)
	sp := &schedPeer{c: c, dir: t.TempDir(), waiting: map[uint64]chan string{}}
	done := make(chan struct{})
	go sp.route(done)
	t.Cleanup(func() {
		c.stdin.Close() // the child's end (startChild's cleanup, run after this one, waits for it)
		<-done
	})
	return sp
}

// route hands each line of the child ("ready SEED" or "result SEED JSON")
// to the seed waiting for it, until the child's output ends.
func (sp *schedPeer) route(done chan<- struct{}) {
	defer close(done)
	for l := range sp.c.lines {
		var seed uint64
		if _, err := fmt.Sscanf(l, "%s %d", new(string), &seed); err != nil {
			continue
		}
		sp.mu.Lock()
		ch := sp.waiting[seed]
		sp.mu.Unlock()
		if ch != nil {
			ch <- l
		}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.gone = true
	for _, ch := range sp.waiting {
		close(ch)
	}
}

// peerRequest is a seed the parent asks the child to run.
type peerRequest struct {
	Seed uint64
	Dir  string
}

// start asks the child to run seed's accepting sides and returns the
// channel of the child's lines for it.
func (sp *schedPeer) start(seed uint64) (chan string, error) {
	b, err := json.Marshal(peerRequest{Seed: seed, Dir: sp.dir})
	if err != nil {
		return nil, err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.gone {
		return nil, errors.New("the peer process has ended")
	}
	ch := make(chan string, 2)
	sp.waiting[seed] = ch
	if _, err := fmt.Fprintf(sp.c.stdin, "%s\n", b); err != nil {
		delete(sp.waiting, seed)
		return nil, fmt.Errorf("asking the peer process: %w", err)
	}
	return ch, nil
}

func (sp *schedPeer) end(seed uint64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	delete(sp.waiting, seed)
}

// awaitLine waits for the child's next line for a seed.
func awaitLine(ch chan string, d time.Duration) (string, error) {
	select {
	case l, ok := <-ch:
		if !ok {
			return "", errors.New("the peer process ended")
		}
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("the peer process said nothing for %v", d)
	}
}

// wireErr is an operation's error as the child sends it: its message and
// the errno it stands for.
type wireErr struct {
	Errno int
	Msg   string
}

func toWireErr(err error) *wireErr {
	if err == nil {
		return nil
	}
	w := &wireErr{Msg: err.Error()}
	for _, en := range wireErrnos {
		if errors.Is(err, en) {
			w.Errno = int(en)
			break
		}
	}
	return w
}

// wireErrnos are the errnos an error sent by the child may stand for,
// found as a user finds them: with errors.Is.
var wireErrnos = []syscall.Errno{
	syscall.ECANCELED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
	syscall.EMSGSIZE, syscall.ECONNREFUSED, syscall.ENOTCONN, syscall.EINVAL, syscall.EAGAIN,
	syscall.ENOMEM, syscall.EFAULT, syscall.EACCES, syscall.EIO,
}

// remoteErr is a wireErr back as an error, matching its errno.
type remoteErr struct {
	msg   string
	errno syscall.Errno
}

func (e *remoteErr) Error() string { return "peer process: " + e.msg }

func (e *remoteErr) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

func (w *wireErr) err() error {
	if w == nil {
		return nil
	}
	return &remoteErr{msg: w.Msg, errno: syscall.Errno(w.Errno)}
}

// wireSide is a sideResult as the child sends it.
type wireSide struct {
	Posted, PostedUnits, SendsOK, OKUnits int
	SendErrs                              []*wireErr
	ShutPosted, ShutDone                  bool
	ShutErr                               *wireErr
	Units                                 int
	Term                                  term
	TermErr                               *wireErr
	Early, SendRefused, RecvRefused       bool
	Violations                            []string
}

func toWireSide(r *sideResult) wireSide {
	w := wireSide{
		Posted: r.posted, PostedUnits: r.postedUnits, SendsOK: r.sendsOK, OKUnits: r.okUnits,
		ShutPosted: r.shutPosted, ShutDone: r.shutDone, ShutErr: toWireErr(r.shutErr),
		Units: r.units, Term: r.term, TermErr: toWireErr(r.termErr),
		Early: r.early, SendRefused: r.sendRefused, RecvRefused: r.recvRefused,
		Violations: r.violations,
	}
	for _, err := range r.sendErrs {
		w.SendErrs = append(w.SendErrs, toWireErr(err))
	}
	return w
}

func (w *wireSide) result() sideResult {
	r := sideResult{
		posted: w.Posted, postedUnits: w.PostedUnits, sendsOK: w.SendsOK, okUnits: w.OKUnits,
		shutPosted: w.ShutPosted, shutDone: w.ShutDone, shutErr: w.ShutErr.err(),
		units: w.Units, term: w.Term, termErr: w.TermErr.err(),
		early: w.Early, sendRefused: w.SendRefused, recvRefused: w.RecvRefused,
	}
	for _, e := range w.SendErrs {
		r.sendErrs = append(r.sendErrs, e.err())
	}
	for _, v := range w.Violations {
		r.violate("peer process: %s", v)
	}
	return r
}

// wireEnd is what the schedule did at one of the child's connection ends.
type wireEnd struct {
	Dropped, DropAbort, RefusedPost bool
}

// peerResult is the child's report of a seed.
type peerResult struct {
	Up    []bool // by connection: accepted
	Sides []wireSide
	Ends  []wireEnd
	Errs  []string // what went wrong outside the sides
}

// runSeedShm runs seed's connecting sides here and its accepting sides in
// the peer process, and returns its violations.
func runSeedShm(seed uint64, peer *schedPeer) (plan *schedPlan, errs []string) {
	plan = newSchedPlan(seed)
	ctx, cancel := context.WithTimeout(context.Background(), seedDeadline)
	defer cancel()
	inner, err := shm.New()
	if err != nil {
		return plan, []string{err.Error()}
	}
	sr := newSeedRun(ctx, plan, faults.New(inner), shmAddrs(peer.dir, seed, len(plan.Conns)), 0)
	sr.crossProcess = true
	sr.p.Set(sr.filters())
	defer func() {
		if err := sr.p.Close(); err != nil {
			errs = append(errs, fmt.Sprintf("closing the faults provider: %v", err))
		}
	}()
	st, err := exs.NewStack(exs.WithProvider("shm", sr.p))
	if err != nil {
		return plan, []string{err.Error()}
	}
	defer func() {
		if err := st.Close(); err != nil {
			errs = append(errs, fmt.Sprintf("closing the stack: %v", err))
		}
		if n := len(sr.p.Conns()); n != 0 {
			errs = append(errs, fmt.Sprintf("%d connection ends still up after the stack closed", n))
		}
	}()

	lines, err := peer.start(seed)
	if err != nil {
		return plan, []string{err.Error()}
	}
	defer peer.end(seed)
	if l, err := awaitLine(lines, seedDeadline); err != nil || l != fmt.Sprintf("ready %d", seed) {
		return plan, []string{fmt.Sprintf("the peer process's listeners: %q %v", l, err)}
	}

	// Connect every connection, then run this process's sides.
	socks := make([]*exs.Socket, len(plan.Conns))
	up := make([]bool, len(plan.Conns))
	for i := range plan.Conns {
		socks[i], up[i], err = sr.connect(st, i)
		if err != nil {
			errs = append(errs, fmt.Sprintf("conn %d: connect: %v", i, err))
		}
	}
	if len(errs) > 0 {
		return plan, errs // the peer process gives up on its accepts at the seed's deadline
	}
	sr.phase.Store(true)
	results := make([][2]sideResult, len(plan.Conns))
	var wg sync.WaitGroup
	for i := range plan.Conns {
		if up[i] {
			wg.Go(func() { results[i][0] = sr.runSide(st, socks[i], i, 0) })
		}
	}
	wg.Wait()
	sr.phase.Store(false)

	l, err := awaitLine(lines, seedDeadline+10*time.Second)
	if err != nil {
		return plan, []string{fmt.Sprintf("the peer process's result: %v", err)}
	}
	var pr peerResult
	if err := json.Unmarshal([]byte(l[len(fmt.Sprintf("result %d ", seed)):]), &pr); err != nil {
		return plan, []string{fmt.Sprintf("the peer process's result %q: %v", l, err)}
	}
	for _, e := range pr.Errs {
		errs = append(errs, "peer process: "+e)
	}
	if len(pr.Up) != len(plan.Conns) || len(pr.Sides) != len(plan.Conns) || len(pr.Ends) != len(plan.Conns) {
		return plan, append(errs, fmt.Sprintf("the peer process's result has %d/%d/%d connections, want %d", len(pr.Up), len(pr.Sides), len(pr.Ends), len(plan.Conns)))
	}
	for i := range plan.Conns {
		if pr.Up[i] != up[i] {
			errs = append(errs, fmt.Sprintf("conn %d: connected %v here, accepted %v in the peer process", i, up[i], pr.Up[i]))
			up[i] = false
		}
		results[i][1] = pr.Sides[i].result()
		e := &endState{f: &plan.Conns[i].Faults[1]}
		if pr.Ends[i].Dropped {
			e.dropped.Store(true)
			e.dropCause = faults.ErrReset
			if pr.Ends[i].DropAbort {
				e.dropCause = faults.ErrAbort
			}
		}
		e.refusedPost.Store(pr.Ends[i].RefusedPost)
		sr.ends[endKey(sr.addrs[i], faults.Acceptor)] = e
	}
	return plan, append(errs, sr.checkAll(up, results)...)
}

// connect connects connection i from st, and reports whether it is up; a
// connect refused by the schedule is not an error.
func (sr *seedRun) connect(st *exs.Stack, i int) (so *exs.Socket, up bool, err error) {
	c := &sr.plan.Conns[i]
	q, err := st.Qcreate(8)
	if err != nil {
		return nil, false, err
	}
	defer st.Qdelete(q)
	if so, err = st.Socket(c.Type, sr.socketOptions(i)...); err != nil {
		return nil, false, err
	}
	if err := so.Connect(q, sr.addrs[i], "connect"); err != nil {
		return nil, false, err
	}
	ev, err := sr.next(q)
	if err != nil {
		return nil, false, err
	}
	// The peer process's end runs its side as soon as it accepted, and may
	// end the connection before the connect completes here: the connect
	// succeeds all the same, and the side then gets what the peer sent.
	switch {
	case ev.Err == nil && c.Refuse:
		return so, false, errors.New("a connect the schedule refused succeeded")
	case ev.Err == nil:
		return so, true, nil
	case !c.Refuse || !errors.Is(ev.Err, syscall.ECONNREFUSED):
		return so, false, fmt.Errorf("connect failed: %w", ev.Err)
	}
	if err := so.Close(q, "close"); err != nil {
		return nil, false, err
	}
	return nil, false, sr.closeWait(q, "close")
}

// childSched is the peer process of the seeds between processes: it reads
// a peerRequest per line, runs its accepting sides, and writes "ready
// SEED" once it listens and "result SEED JSON" at the seed's end.
func childSched(string) error {
	base := currentLevels()
	base.maps = math.MaxInt32 // the runtime's own mappings grow as it runs
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("up")
	var wg sync.WaitGroup
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var req peerRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("request %q: %w", sc.Text(), err)
		}
		wg.Go(func() {
			res := acceptSeed(req, func() { say("ready %d", req.Seed) })
			b, err := json.Marshal(res)
			if err != nil {
				b, _ = json.Marshal(peerResult{Errs: []string{err.Error()}})
			}
			say("result %d %s", req.Seed, b)
		})
	}
	wg.Wait()
	if l, ok := settle(base); !ok {
		return fmt.Errorf("leak in the peer process: %v, then %v", base, l)
	}
	return sc.Err()
}

// acceptSeed runs the accepting sides of a seed in the peer process.
func acceptSeed(req peerRequest, ready func()) (res peerResult) {
	plan := newSchedPlan(req.Seed)
	n := len(plan.Conns)
	res = peerResult{Up: make([]bool, n), Sides: make([]wireSide, n), Ends: make([]wireEnd, n)}
	readied := false
	defer func() {
		if !readied {
			ready()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), seedDeadline)
	defer cancel()
	inner, err := shm.New()
	if err != nil {
		res.Errs = append(res.Errs, err.Error())
		return res
	}
	sr := newSeedRun(ctx, plan, faults.New(inner), shmAddrs(req.Dir, req.Seed, n), 1)
	sr.p.Set(sr.filters()) // sr.phase stays false: no registration is refused here
	defer func() {
		if err := sr.p.Close(); err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("closing the faults provider: %v", err))
		}
	}()
	st, err := exs.NewStack(exs.WithProvider("shm", sr.p))
	if err != nil {
		res.Errs = append(res.Errs, err.Error())
		return res
	}
	defer func() {
		if err := st.Close(); err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("closing the stack: %v", err))
		}
		if cs := sr.p.Conns(); len(cs) != 0 {
			var d []string
			for _, c := range cs {
				d = append(d, fmt.Sprintf("%s %v %+v", c.Addr(), c.Side(), c.Stats()))
			}
			res.Errs = append(res.Errs, fmt.Sprintf("%d connection ends still up after the stack closed: %v", len(cs), d))
		}
		if k := sr.unknown.Load(); k > 0 {
			res.Errs = append(res.Errs, fmt.Sprintf("%d messages or posts of connection ends without a fault schedule", k))
		}
	}()
	q, err := st.Qcreate(n)
	if err != nil {
		res.Errs = append(res.Errs, err.Error())
		return res
	}
	defer st.Qdelete(q)
	lq, err := st.Qcreate(n) // the listeners' closes
	if err != nil {
		res.Errs = append(res.Errs, err.Error())
		return res
	}
	defer st.Qdelete(lq)
	lns := make([]*exs.Socket, n)
	accepts := 0
	for i, c := range plan.Conns {
		if c.Refuse {
			continue // refused at the connecting end
		}
		if lns[i], err = st.Socket(c.Type, sr.socketOptions(i)...); err == nil {
			if err = lns[i].Bind(sr.addrs[i]); err == nil {
				if err = lns[i].Listen(0); err == nil {
					err = lns[i].Accept(q, i)
				}
			}
		}
		if err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("conn %d: listen: %v", i, err))
			return res
		}
		accepts++
	}
	ready()
	readied = true
	var wg sync.WaitGroup
	defer wg.Wait() // before the stack closes
	for range accepts {
		ev, err := sr.next(q)
		if err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("accepts: %v", err))
			return res
		}
		i, ok := ev.User.(int)
		if ev.Type != exs.EventAccept || !ok || ev.Err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("accept: %v %v %v", ev.Type, ev.User, ev.Err))
			return res
		}
		res.Up[i] = true
		if err := lns[i].Close(lq, i); err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("conn %d: closing the listener: %v", i, err))
			return res
		}
		if err := sr.closeWait(lq, i); err != nil {
			res.Errs = append(res.Errs, fmt.Sprintf("conn %d: closing the listener: %v", i, err))
			return res
		}
		so := ev.Accepted
		wg.Go(func() {
			r := sr.runSide(st, so, i, 1)
			res.Sides[i] = toWireSide(&r)
		})
	}
	wg.Wait()
	for i := range plan.Conns {
		e := sr.ends[endKey(sr.addrs[i], faults.Acceptor)]
		res.Ends[i] = wireEnd{
			Dropped:     e.dropped.Load(),
			DropAbort:   errors.Is(e.dropCause, syscall.ECONNABORTED),
			RefusedPost: e.refusedPost.Load(),
		}
	}
	return res
}
