package measure

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Transports lists the transports by name, as --transport accepts them.
var Transports = []struct {
	Name string
	Help string
	make func() (Transport, error)
}{
	{"exs-shm", "exs sockets to a child exsperf process over the same-host provider (shm:, Linux)", func() (Transport, error) { return startExsProc(context.Background()) }},
	{"exs-tcp", "exs sockets to a child exsperf process over the TCP provider on loopback (tcp:, Linux)", func() (Transport, error) { return startExsTCP(context.Background()) }},
	{"exs-tcp-netns", "exs sockets to a child exsperf process in another network namespace, over the TCP provider and a veth pair (Linux, root, iproute2)", func() (Transport, error) { return startExsTCPNetns(context.Background()) }},
	{"exs", "exs sockets over the in-process verbs provider, both sides in this process", func() (Transport, error) { return exsTransport{}, nil }},
	{"engine", "dynproto engines over process memory, one goroutine (protocol cost only)", func() (Transport, error) { return Engine{}, nil }},
	{"tcp", "plain Go TCP over loopback, two goroutines in this process (anchor)", func() (Transport, error) { return &tcpTransport{}, nil }},
	{"tcp-proc", "plain Go TCP over loopback to a child exsperf process (anchor)", func() (Transport, error) { return newProcTransport("tcp") }},
}

// Names lists the names of Transports, separated by commas.
func Names() string {
	var b strings.Builder
	for i, t := range Transports {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.Name)
	}
	return b.String()
}

// ErrUnknownTransport is the error of Open for a name it does not know.
var ErrUnknownTransport = errors.New("unknown transport")

// Open returns the transport called name. "auto" is exs-shm (a child
// process as the peer over the same-host provider) or, when that cannot run
// here, exs over the in-process provider, with a note that says why
// (Notes). An unknown name is an ErrUnknownTransport.
func Open(name string) (Transport, error) {
	if name == "auto" {
		t, err := startExsProc(context.Background())
		if err == nil {
			return t, nil
		}
		return fallbackTransport{exsTransport{}, fmt.Sprintf("the same-host provider could not run here (%v): measured instead with exs over the in-process provider, both sides in this process", err)}, nil
	}
	for _, t := range Transports {
		if t.Name == name {
			return t.make()
		}
	}
	return nil, fmt.Errorf("%w %q (want auto, %s)", ErrUnknownTransport, name, Names())
}

// Auto is what "auto" means where the same-host provider runs.
const Auto = "exs-shm"

// fallbackTransport is the transport "auto" chose when the first choice
// could not run, with the reason.
type fallbackTransport struct {
	Transport
	why string
}

func (f fallbackTransport) notes() []string { return []string{f.why} }

// Notes returns what a transport has to say about how it runs: why "auto"
// chose what it did.
func Notes(t Transport) []string {
	if n, ok := t.(interface{ notes() []string }); ok {
		return n.notes()
	}
	return nil
}

// PathNotes says, after the measurements, how a transport that crosses
// processes moved the bytes (from its provider's statistics).
func PathNotes(t Transport) []string {
	if p, ok := t.(*exsProcTransport); ok {
		return p.notes()
	}
	return nil
}
