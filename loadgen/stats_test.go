package loadgen

import (
	"testing"
	"time"
)

func TestComputePercentiles(t *testing.T) {
	ms := time.Millisecond
	seq := func(n int) []time.Duration { // 1ms..n ms, reversed to check sorting
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = time.Duration(n-i) * ms
		}
		return s
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Percentiles
	}{
		{name: "empty", in: nil, want: Percentiles{}},
		{name: "single", in: []time.Duration{7 * ms},
			want: Percentiles{N: 1, P50: 7 * ms, P90: 7 * ms, P99: 7 * ms, Mean: 7 * ms, Max: 7 * ms}},
		{name: "two interpolates", in: []time.Duration{2 * ms, 1 * ms},
			want: Percentiles{N: 2, P50: 1500 * time.Microsecond, P90: 1900 * time.Microsecond,
				P99: 1990 * time.Microsecond, Mean: 1500 * time.Microsecond, Max: 2 * ms}},
		{name: "1..101 exact ranks", in: seq(101),
			want: Percentiles{N: 101, P50: 51 * ms, P90: 91 * ms, P99: 100 * ms, Mean: 51 * ms, Max: 101 * ms}},
		{name: "1..100", in: seq(100),
			want: Percentiles{N: 100, P50: 50500 * time.Microsecond, P90: 90100 * time.Microsecond,
				P99: 99010 * time.Microsecond, Mean: 50500 * time.Microsecond, Max: 100 * ms}},
		{name: "outlier only moves tail", in: []time.Duration{ms, ms, ms, ms, ms, ms, ms, ms, ms, time.Second},
			want: Percentiles{N: 10, P50: ms, P90: ms + time.Duration(0.1*float64(time.Second-ms)),
				P99: ms + time.Duration(0.91*float64(time.Second-ms)), Mean: 100900 * time.Microsecond, Max: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]time.Duration(nil), tt.in...)
			got := computePercentiles(tt.in)
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			for i := range orig {
				if tt.in[i] != orig[i] {
					t.Fatalf("input modified at %d", i)
				}
			}
		})
	}
}
