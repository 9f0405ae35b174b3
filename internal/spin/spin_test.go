package spin

import (
	"testing"
	"testing/synctest"
	"time"
)

// spinUntil calls Next until it returns something else than Again, at most
// limit times, and returns that and the number of calls.
func spinUntil(s *Spin, limit int) (Verdict, int) {
	for n := 1; n <= limit; n++ {
		if v := s.Next(); v != Again {
			return v, n
		}
	}
	return Again, limit
}

func TestForZeroBlocksAtOnce(t *testing.T) {
	s := For(0)
	if v := s.Next(); v != Block {
		t.Fatalf("For(0).Next() = %v, want Block", v)
	}
	s = For(-time.Second)
	if v := s.Next(); v != Block {
		t.Fatalf("For(-1s).Next() = %v, want Block", v)
	}
}

func TestForEndsAfterItsTime(t *testing.T) {
	s := For(time.Millisecond)
	start := time.Now()
	v, n := spinUntil(&s, 1<<30)
	if v != Block {
		t.Fatalf("spin ended with %v after %d calls, want Block", v, n)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a 1 ms spin lasted %v", d)
	}
}

// In a synctest bubble the clock stands still while goroutines run: the
// spin still ends, after its bound on checks.
func TestForEndsWithoutAClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := For(50 * time.Microsecond)
		v, n := spinUntil(&s, 1<<20)
		if v != Block {
			t.Fatalf("spin ended with %v after %d calls, want Block", v, n)
		}
		if want := int(50*time.Microsecond/iterCost) + clockEvery; n > want {
			t.Fatalf("spin took %d calls, want at most %d", n, want)
		}
	})
}

func TestZeroSpinsOn(t *testing.T) {
	var s Spin
	if v, n := spinUntil(&s, 100000); v != Again {
		t.Fatalf("zero Spin ended with %v after %d calls", v, n)
	}
}

func TestDeadline(t *testing.T) {
	var s Spin
	s.SetDeadline(time.Now().Add(time.Millisecond))
	if v, n := spinUntil(&s, 1<<30); v != Expired {
		t.Fatalf("spin with a deadline ended with %v after %d calls, want Expired", v, n)
	}
	// A deadline before the spin time is up wins.
	s = For(time.Hour)
	s.SetDeadline(time.Now())
	if v, n := spinUntil(&s, 100); v != Expired || n != 1 {
		t.Fatalf("spin with a past deadline: %v after %d calls, want Expired after 1", v, n)
	}
}

func TestReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := For(time.Microsecond) // 50 checks at most
		for range 40 {
			if v := s.Next(); v != Again {
				t.Fatalf("Next = %v before the bound", v)
			}
		}
		s.Reset()
		for range 40 {
			if v := s.Next(); v != Again {
				t.Fatalf("Next = %v after Reset, before the bound", v)
			}
		}
		if v, _ := spinUntil(&s, 100); v != Block {
			t.Fatalf("spin ended with %v, want Block", v)
		}
	})
}

func BenchmarkNext(b *testing.B) {
	s := For(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		s.Next()
	}
}
