package main

import (
	"math"
	"testing"
)

func TestShareOfBandwidth(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name      string
		ts        []float64 // tokens per second of each repetition
		read      []float64 // bytes per second, before each repetition and after the last
		wantShare float64
		wantRead  float64 // GB/s
		wantEach  []float64
	}{
		{"steady", []float64{10, 10, 10}, []float64{1000 * mib, 1000 * mib, 1000 * mib, 1000 * mib}, 0.1, 1000 * mib / 1e9, []float64{0.1, 0.1, 0.1}},
		// A repetition next to a fast reading is compared with it, not with the slower one.
		{"a fast moment", []float64{10, 10, 10}, []float64{1000 * mib, 2000 * mib, 1000 * mib, 1000 * mib}, 0.05, 2000 * mib / 1e9, []float64{0.05, 0.05, 0.1}},
		{"even count takes the middle two", []float64{10, 20}, []float64{1000 * mib, 1000 * mib, 1000 * mib}, 0.15, 1000 * mib / 1e9, []float64{0.1, 0.2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row := benchRow{WeightBytes: 10 * mib, SamplesTs: tc.ts}
			shareOfBandwidth(&row, tc.read)
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
			if !near(row.BandwidthShare, tc.wantShare) || !near(row.ReadGBps, tc.wantRead) {
				t.Errorf("share %v, read %v GB/s; want %v, %v", row.BandwidthShare, row.ReadGBps, tc.wantShare, tc.wantRead)
			}
			for i, s := range row.BandwidthShares {
				if !near(s, tc.wantEach[i]) {
					t.Errorf("repetition %d share %v, want %v", i, s, tc.wantEach[i])
				}
			}
		})
	}
}
