//go:build !race

package usertest

// raceEnabled reports a build with the race detector, whose runtime maps
// shadow memory of its own as the heap grows.
const raceEnabled = false
