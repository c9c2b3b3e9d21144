//go:build race

package tokenizer

// raceEnabled reports whether the race detector is on; it slows code unevenly, so timing
// checks only log under it.
const raceEnabled = true
