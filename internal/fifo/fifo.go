// Package fifo provides a first-in first-out queue whose storage is reused,
// so that a queue in steady state does not allocate. It is pure: no I/O, no
// goroutines, no locks.
package fifo

// Queue is a first-in first-out queue backed by a slice. The zero value is
// empty and ready to use. Not safe for concurrent use.
type Queue[T any] struct {
	buf  []T
	head int
}

// Len returns the number of elements.
func (q *Queue[T]) Len() int { return len(q.buf) - q.head }

// At returns a pointer to the i-th element from the head, which stays
// valid until the next Push or Truncate.
func (q *Queue[T]) At(i int) *T { return &q.buf[q.head+i] }

// Push adds v at the tail. It moves the elements to the front of the
// storage rather than grow it when the head has room.
func (q *Queue[T]) Push(v T) {
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	q.buf = append(q.buf, v)
}

// Pop removes the head and returns it. The queue must not be empty.
func (q *Queue[T]) Pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.buf = q.buf[:0]
		q.head = 0
	}
	return v
}

// Truncate drops every element after the first n.
func (q *Queue[T]) Truncate(n int) {
	end := q.head + n
	clear(q.buf[end:])
	q.buf = q.buf[:end]
	if n == 0 {
		q.buf = q.buf[:0]
		q.head = 0
	}
}

// Clone returns a copy that shares no storage with q.
func (q *Queue[T]) Clone() Queue[T] {
	if q.Len() == 0 {
		return Queue[T]{}
	}
	return Queue[T]{buf: append([]T(nil), q.buf[q.head:]...)}
}
