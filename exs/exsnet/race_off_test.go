//go:build !race

package exsnet_test

const raceEnabled = false
