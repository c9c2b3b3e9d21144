package ops

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func mustRope(t *testing.T, c RopeConfig) *Rope {
	t.Helper()
	r, err := NewRope(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rotate(r *Rope, x []float32, headDim int, pos float64) []float32 {
	cs := make([]float32, r.TableLen())
	r.Table(cs, pos)
	y := append([]float32(nil), x...)
	r.Apply(y, headDim, cs)
	return y
}

func near(a, b []float32, tol float64) bool {
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol {
			return false
		}
	}
	return true
}

// TestRopeTable checks each pair's angle against the formula it documents, for plain, linear,
// factored and YaRN ropes.
func TestRopeTable(t *testing.T) {
	const dims, pos = 8, 37.0
	factors := []float32{1, 2, 4, 8}
	for _, tc := range []struct {
		name  string
		c     RopeConfig
		theta func(i int) float64 // angle of pair i at pos
		scale float64
	}{
		{"plain", RopeConfig{Dims: dims, Base: 10000}, func(i int) float64 {
			return pos * math.Pow(10000, -2*float64(i)/dims)
		}, 1},
		{"linear", RopeConfig{Dims: dims, Base: 10000, FreqScale: 0.25}, func(i int) float64 {
			return pos * 0.25 * math.Pow(10000, -2*float64(i)/dims)
		}, 1},
		{"factors", RopeConfig{Dims: dims, Base: 500000, Factors: factors}, func(i int) float64 {
			return pos * math.Pow(500000, -2*float64(i)/dims) / float64(factors[i])
		}, 1},
		{"attn-factor", RopeConfig{Dims: dims, Base: 10000, AttnFactor: 1.5}, func(i int) float64 {
			return pos * math.Pow(10000, -2*float64(i)/dims)
		}, 1.5},
		{"yarn-unscaled-is-plain", RopeConfig{Dims: dims, Base: 10000, YaRN: true, OrigCtx: 4096}, func(i int) float64 {
			return pos * math.Pow(10000, -2*float64(i)/dims)
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRope(t, tc.c)
			cs := make([]float32, r.TableLen())
			r.Table(cs, pos)
			for i := range dims / 2 {
				th := tc.theta(i)
				if math.Abs(float64(cs[2*i])-tc.scale*math.Cos(th)) > 1e-5 || math.Abs(float64(cs[2*i+1])-tc.scale*math.Sin(th)) > 1e-5 {
					t.Errorf("pair %d: cos,sin = %g,%g, want %g,%g", i, cs[2*i], cs[2*i+1], tc.scale*math.Cos(th), tc.scale*math.Sin(th))
				}
			}
		})
	}
}

// TestRopeYaRN: with YaRN the fastest pairs keep their unscaled frequency, the slowest are
// interpolated by FreqScale, and cos/sin carry the 1 + 0.1 ln(factor) magnitude.
func TestRopeYaRN(t *testing.T) {
	const dims = 64
	r := mustRope(t, RopeConfig{Dims: dims, Base: 10000, FreqScale: 0.25, YaRN: true, OrigCtx: 4096})
	plain := mustRope(t, RopeConfig{Dims: dims, Base: 10000})
	if r.mix[0] != 1 || r.mix[dims/2-1] != 0 {
		t.Fatalf("ramp ends %g, %g, want 1 (extrapolate) and 0 (interpolate)", r.mix[0], r.mix[dims/2-1])
	}
	if r.extrap[0] != plain.interp[0] || math.Abs(float64(r.interp[dims/2-1]/plain.interp[dims/2-1])-0.25) > 1e-6 {
		t.Error("YaRN frequencies are not the unscaled and the scaled ones")
	}
	if want := float32(1 + 0.1*math.Log(4)); math.Abs(float64(r.mscale-want)) > 1e-6 {
		t.Errorf("mscale %g, want %g", r.mscale, want)
	}
}

// TestRopeNEOX: NEOX rotates (x[i], x[i+d/2]); that is the normal rope on the interleaved head.
func TestRopeNEOX(t *testing.T) {
	const hd, dims = 12, 8 // the last 4 elements of each head are not rotated
	normal := mustRope(t, RopeConfig{Dims: dims, Base: 10000})
	neox := mustRope(t, RopeConfig{Dims: dims, Base: 10000, NEOX: true})
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 2*hd)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	inter := make([]float32, len(x)) // each head's rotated part as adjacent pairs
	copy(inter, x)
	for h := 0; h < len(x); h += hd {
		for i := range dims / 2 {
			inter[h+2*i], inter[h+2*i+1] = x[h+i], x[h+i+dims/2]
		}
	}
	got, want := rotate(neox, x, hd, 11), rotate(normal, inter, hd, 11)
	for h := 0; h < len(x); h += hd {
		for i := range dims / 2 {
			if math.Abs(float64(got[h+i]-want[h+2*i])) > 1e-6 || math.Abs(float64(got[h+i+dims/2]-want[h+2*i+1])) > 1e-6 {
				t.Fatalf("head %d pair %d differs", h/hd, i)
			}
		}
		if !near(got[h+dims:h+hd], x[h+dims:h+hd], 0) {
			t.Fatalf("head %d: unrotated tail changed", h/hd)
		}
	}
}

// TestRopeShiftComposes: rotating to p then shifting by d equals rotating to p+d (what the KV
// cache's sequence shift relies on), also with an attention factor and YaRN.
func TestRopeShiftComposes(t *testing.T) {
	for _, c := range []RopeConfig{
		{Dims: 16, Base: 10000},
		{Dims: 16, Base: 10000, NEOX: true, AttnFactor: 1.2},
		{Dims: 16, Base: 10000, FreqScale: 0.5, YaRN: true, OrigCtx: 2048},
	} {
		r := mustRope(t, c)
		x := make([]float32, 32)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		at := rotate(r, x, 16, 40)
		cs := make([]float32, r.TableLen())
		r.ShiftTable(cs, -25)
		r.Apply(at, 16, cs)
		if want := rotate(r, x, 16, 15); !near(at, want, 1e-4) {
			t.Errorf("%+v: shift does not compose: %v vs %v", c, at[:4], want[:4])
		}
	}
}

func TestRopeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    RopeConfig
		want string
	}{
		{"odd dims", RopeConfig{Dims: 7, Base: 10000}, "even"},
		{"zero base", RopeConfig{Dims: 8}, "freq_base"},
		{"factor count", RopeConfig{Dims: 8, Base: 1e4, Factors: []float32{1}}, "factors"},
		{"zero factor", RopeConfig{Dims: 4, Base: 1e4, Factors: []float32{1, 0}}, "not positive"},
		{"negative scale", RopeConfig{Dims: 4, Base: 1e4, FreqScale: -1}, "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRope(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
