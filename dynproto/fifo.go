package dynproto

// fifo is a first-in first-out queue backed by a slice whose storage is reused,
// so that a queue in steady state does not allocate. The zero value is empty
// and ready to use. Not safe for concurrent use.
type fifo[T any] struct {
	buf  []T
	head int
}

func (q *fifo[T]) len() int { return len(q.buf) - q.head }

// at returns a pointer to the i-th element from the head.
func (q *fifo[T]) at(i int) *T { return &q.buf[q.head+i] }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	q.buf = append(q.buf, v)
}

func (q *fifo[T]) pop() T {
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

// truncate drops every element after the first n.
func (q *fifo[T]) truncate(n int) {
	end := q.head + n
	clear(q.buf[end:])
	q.buf = q.buf[:end]
	if n == 0 {
		q.buf = q.buf[:0]
		q.head = 0
	}
}

// clone returns a copy that shares no storage with q.
func (q *fifo[T]) clone() fifo[T] {
	if q.len() == 0 {
		return fifo[T]{}
	}
	return fifo[T]{buf: append([]T(nil), q.buf[q.head:]...)}
}
