package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations, shared between processes (no FUTEX_PRIVATE_FLAG): the
// word lives in a mapping both processes share.
const (
	futexWait = 0
	futexWake = 1
)

// sleepOn blocks while *w == v, at most timeoutNs nanoseconds.
func sleepOn(w *atomic.Uint32, v uint32, timeoutNs int64) {
	ts := unix.NsecToTimespec(timeoutNs)
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wakeOne wakes a sleeper on w.
func wakeOne(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, 1, 0, 0, 0)
}

// Values of sideBlock.sleeping.
const (
	awake       = 0 // the receiver runs
	sleepNormal = 1 // it sleeps on the bell until a record arrives (ring)
)

// ring wakes the receiver of side b if it sleeps waiting for records. The
// caller has published what the receiver should see first.
func (b *sideBlock) ring() {
	if b.sleeping.Load() == sleepNormal {
		b.bell.Add(1)
		wakeOne(&b.bell)
	}
}

// ringAlways wakes the receiver of side b if it sleeps, making sure a
// receiver about to sleep sees the change even if it has not yet said so.
func (b *sideBlock) ringAlways() {
	b.bell.Add(1)
	if b.sleeping.Load() == sleepNormal {
		wakeOne(&b.bell)
	}
}

// seals a memfd carries once set up: its size can no longer change, so a
// peer cannot make the other side fault by truncating the mapping.
const wantSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// createMapping makes a sealed memfd of size bytes and maps it.
func createMapping(size uint64) (fd int, m []byte, err error) {
	fd, err = unix.MemfdCreate("exs-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, wantSeals)
	}
	if err == nil {
		m, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: shared mapping of %d bytes: %w", size, err)
	}
	return fd, m, nil
}

// mapPeer checks a memfd received from a peer (sealed, of the expected
// size) and maps it.
func mapPeer(fd int, size uint64) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&wantSeals != wantSeals {
		return nil, fmt.Errorf("shm: peer's mapping is not sealed (%v): %w", err, errProtocol)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: fstat of peer's mapping: %w", err)
	}
	if uint64(st.Size) != size {
		return nil, fmt.Errorf("shm: peer's mapping has %d bytes, want %d: %w", st.Size, size, errProtocol)
	}
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map peer's mapping: %w", err)
	}
	return m, nil
}

// iovecs holds the argument lists of one cross-memory-attach call, reused
// from call to call.
type iovecs struct {
	local  []unix.Iovec
	remote []unix.RemoteIovec
}

// addLocal appends the local segments, skipping empty ones.
func (v *iovecs) addLocal(segs ...[]byte) {
	for _, s := range segs {
		if len(s) > 0 {
			iv := unix.Iovec{Base: &s[0]}
			iv.SetLen(len(s))
			v.local = append(v.local, iv)
		}
	}
}

// addRemote appends a remote range if not empty.
func (v *iovecs) addRemote(addr uint64, n int) {
	if n > 0 {
		v.remote = append(v.remote, unix.RemoteIovec{Base: uintptr(addr), Len: n})
	}
}

// reset empties the lists, keeping their storage; it drops the references
// to local memory.
func (v *iovecs) reset() {
	clear(v.local)
	v.local = v.local[:0]
	v.remote = v.remote[:0]
}

// transfer moves n bytes between the local and the remote lists of pid's
// memory (write: local to remote), calling again after a partial
// transfer. It returns the bytes moved.
func (v *iovecs) transfer(pid int, write bool, n int) (int, error) {
	done := 0
	for done < n {
		var k int
		var err error
		if write {
			k, err = unix.ProcessVMWritev(pid, v.local, v.remote, 0)
		} else {
			k, err = unix.ProcessVMReadv(pid, v.local, v.remote, 0)
		}
		if err != nil {
			return done, err
		}
		if k <= 0 {
			return done, unix.EFAULT
		}
		done += k
		if done < n {
			v.local = trimLocal(v.local, k)
			v.remote = trimRemote(v.remote, k)
		}
	}
	return done, nil
}

func trimLocal(l []unix.Iovec, k int) []unix.Iovec {
	for k > 0 && len(l) > 0 {
		if int(l[0].Len) > k {
			l[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(l[0].Base), k))
			l[0].SetLen(int(l[0].Len) - k)
			return l
		}
		k -= int(l[0].Len)
		l = l[1:]
	}
	return l
}

func trimRemote(r []unix.RemoteIovec, k int) []unix.RemoteIovec {
	for k > 0 && len(r) > 0 {
		if r[0].Len > k {
			r[0].Base += uintptr(k)
			r[0].Len -= k
			return r
		}
		k -= r[0].Len
		r = r[1:]
	}
	return r
}

// uintptrOf returns the address of the first byte of a non-empty slice.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
