package exsnet_test

import (
	"testing"

	"golang.org/x/net/nettest"
)

func TestConnNettest(t *testing.T) {
	t.Run("inproc", func(t *testing.T) { nettest.TestConn(t, localPipe(t, inprocAddr)) })
	t.Run("shm", func(t *testing.T) { nettest.TestConn(t, localPipe(t, shmAddr)) })
	t.Run("process", func(t *testing.T) { nettest.TestConn(t, processPipe(t)) })
}
