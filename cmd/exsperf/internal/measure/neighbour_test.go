package measure

import (
	"context"
	"testing"
)

// TestNeighbour starts a neighbour and stops it: it announces itself,
// spins, and exits when its stdin closes, having used CPU time.
func TestNeighbour(t *testing.T) {
	n, err := StartNeighbour(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	share, err := n.Close()
	if err != nil || !(share > 0) {
		t.Errorf("share of a CPU %v, %v", share, err)
	}
}
