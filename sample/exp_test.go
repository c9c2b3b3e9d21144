package sample

import (
	"math"
	"testing"

	"ubatch/ops"
)

// TestWiden checks widen against the float64 conversion for every kind of ExpNeg result.
func TestWiden(t *testing.T) {
	for x := float32(-70); x <= 0; x += 0.001 {
		e := ops.ExpNeg(x)
		if got, want := widen(e), float64(e); got != want {
			t.Fatalf("widen(%v) = %v, want %v", e, got, want)
		}
	}
	if widen(0) != 0 || widen(1) != 1 || math.IsNaN(widen(0.5)) {
		t.Fatal("widen of exact values")
	}
}
