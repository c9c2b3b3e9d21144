package ops

import "testing"

// The peak loops measure the machine and have no twin to compare with: the tests check that
// every loop this CPU lists runs and reports positive, finite rates.
func TestPeakLoopsRun(t *testing.T) {
	loops := PeakLoops()
	if len(loops) == 0 {
		t.Skip("no peak loops on this architecture")
	}
	for _, l := range loops {
		t.Run(l.Name, func(t *testing.T) {
			r := MeasurePeak(l, 2, 1)
			for _, v := range []struct {
				name string
				rate float64
			}{{"per core", r.PerCore}, {"all cores", r.AllCores}, {"all cores, wall", r.AllCoresWall}} {
				// 1e15 ops/s on one or two cores would be a miscount, not a fast CPU.
				if !(v.rate > 0 && v.rate < 1e15) {
					t.Errorf("%s: %g ops/s", v.name, v.rate)
				}
			}
		})
	}
}
