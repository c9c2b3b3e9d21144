package loadgen

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarizes a set of latency samples. Quantiles interpolate
// linearly between the two nearest ranks of the sorted samples (rank
// q*(N-1), numpy's default), so P50 of {1, 2} is 1.5. All fields are zero
// when N == 0. In JSON the durations are integer nanoseconds.
type Percentiles struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	Mean time.Duration `json:"mean_ns"`
	Max  time.Duration `json:"max_ns"`
}

// computePercentiles summarizes samples without modifying them.
func computePercentiles(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64 // float: an int64 sum of many long samples could overflow
	for _, d := range s {
		sum += float64(d)
	}
	return Percentiles{
		N:    len(s),
		P50:  quantile(s, 0.50),
		P90:  quantile(s, 0.90),
		P99:  quantile(s, 0.99),
		Mean: time.Duration(math.Round(sum / float64(len(s)))),
		Max:  s[len(s)-1],
	}
}

// quantile of sorted, non-empty s, for q in [0, 1].
func quantile(s []time.Duration, q float64) time.Duration {
	rank := q * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(s)-1)
	frac := rank - float64(lo)
	return s[lo] + time.Duration(math.Round(frac*float64(s[hi]-s[lo])))
}
