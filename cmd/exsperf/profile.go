package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file prefix: when set, each exsperf process writes a
// CPU profile of its whole run to PREFIX.PID-ROLE.pprof, ROLE being the
// subcommand ("compare", or "peer" for the child that serves the parent),
// so that both ends of an exs-shm run can be profiled:
//
//	EXSPERF_CPUPROFILE=/tmp/prof exsperf compare -sizes 1M
//	go tool pprof -top /tmp/prof.*-peer.pprof
const profileEnv = "EXSPERF_CPUPROFILE"

// startProfile starts the CPU profile that profileEnv asks for, if any,
// and returns the function that stops it.
func startProfile(args []string) (func(), error) {
	prefix := os.Getenv(profileEnv)
	if prefix == "" {
		return func() {}, nil
	}
	role := "compare"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		role = args[0]
	}
	f, err := os.Create(fmt.Sprintf("%s.%d-%s.pprof", prefix, os.Getpid(), role))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
