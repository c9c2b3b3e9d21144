//go:build !race

package server

// raceEnabled scales down the heaviest tests: the race detector slows the forward pass ~10x.
const raceEnabled = false
