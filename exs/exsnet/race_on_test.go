//go:build race

package exsnet_test

const raceEnabled = true
