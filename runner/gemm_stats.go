package runner

import (
	"slices"
	"strings"
	"time"

	"ubatch/ops"
)

// GEMMStats counts the work and time of a context's matmuls by weight type, for ubatch bench's
// share of peak: ops (two per multiply-add), the wall time of the parallel runs (the workers'
// products, not the activations' quantization before them) and the process's CPU time over
// them (on a machine shared with other work, the cores' own rate). A run whose jobs have
// different weight types (a Q4_K_M model's Q, K and V: Q4_K, Q4_K, Q6_K) counts under the
// joined names ("q4_K+q6_K"), since one time covers them all.
type GEMMStats struct {
	// Tokens is the smallest micro-batch counted: runs of fewer tokens (decode steps, a
	// prompt's last rows) are left out.
	Tokens int
	byType map[string]*GEMMStat
}

// GEMMStat is one weight type's (or mix's) count.
type GEMMStat struct {
	Types string
	Ops   float64
	Time  time.Duration // wall time
	CPU   time.Duration // the process's CPU time over the same runs (0 where unknown)
	Runs  int
}

// CountGEMM starts counting the context's matmuls into s (of at least s.Tokens tokens); nil
// stops. Counting allocates (the keys), so it is for benchmarks; uncounted, a matmul pays one
// nil check.
func (c *Runtime) CountGEMM(s *GEMMStats) { c.gemm = s }

// Stats returns the counts so far, by weight type name.
func (s *GEMMStats) Stats() []GEMMStat {
	var out []GEMMStat
	for _, v := range s.byType {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b GEMMStat) int { return strings.Compare(a.Types, b.Types) })
	return out
}

// Reset clears the counts.
func (s *GEMMStats) Reset() { clear(s.byType) }

// run runs t on the pool and counts it.
func (s *GEMMStats) run(t *matmulTask, pool *ops.Pool) {
	if t.n < s.Tokens {
		pool.Run(t.total, t)
		return
	}
	var names []string
	var n float64
	for j := range t.nJobs {
		w := t.jobs[j].w
		n += 2 * float64(w.Rows) * float64(w.Cols) * float64(t.n)
		if name := w.Type.String(); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	key := strings.Join(names, "+")
	start, c0 := time.Now(), ops.ProcessCPU()
	pool.Run(t.total, t)
	d, cpu := time.Since(start), ops.ProcessCPU()-c0
	if s.byType == nil {
		s.byType = map[string]*GEMMStat{}
	}
	st := s.byType[key]
	if st == nil {
		st = &GEMMStat{Types: key}
		s.byType[key] = st
	}
	st.Ops += n
	st.Time += d
	st.CPU += cpu
	st.Runs++
}
