package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/ops"
)

// TestBenchPeak: --peak prints one row per loop this CPU has, every rate positive.
func TestBenchPeak(t *testing.T) {
	loops := ops.PeakLoops()
	if len(loops) == 0 {
		t.Skip("no peak loops on this architecture")
	}
	code, out, errs := ubatch(t, "bench", "--peak", "-t", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, l := range loops {
		line := ""
		for _, s := range strings.Split(out, "\n") {
			if strings.HasPrefix(s, "| "+l.Name+" ") {
				line = s
			}
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 4 {
			t.Fatalf("no row for %s in:\n%s", l.Name, out)
		}
		for _, c := range cells[1:] {
			if v, err := strconv.ParseFloat(strings.TrimSpace(c), 64); err != nil || !(v > 0) {
				t.Errorf("%s: rate %q", l.Name, c)
			}
		}
	}
}

// TestBenchGEMMShare: a pp test of a whole micro-batch reports its GEMM by weight type and, where
// the CPU has peak loops, its share of the peak.
func TestBenchGEMMShare(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf") // F32 weights: the f32 peak
	code, out, errs := ubatch(t, "bench", "-m", model, "-p", "64", "-n", "0", "-r", "1", "-t", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	re := `pp64 GEMM F32: [0-9.]+ GOP/s`
	if len(ops.PeakLoops()) > 0 {
		re += `.*, [0-9]+% of the peak [0-9.]+ GOP/s \(f32 `
	}
	if !regexp.MustCompile(re).MatchString(out) {
		t.Errorf("no line matching %q in:\n%s", re, out)
	}
	if !strings.Contains(out, "pp64: ") || !strings.Contains(out, "by process CPU time per thread") {
		t.Errorf("no CPU-time rate in:\n%s", out)
	}
}

func TestPeakFor(t *testing.T) {
	loops := ops.PeakLoops()
	if len(loops) == 0 {
		t.Skip("no peak loops on this architecture")
	}
	cases := []struct {
		name, types string
		kind        ops.PeakKind
	}{
		{"quantized", "Q8_0", ops.PeakInt8},
		{"a mix of quantized types", "Q4_K+Q6_K", ops.PeakInt8},
		{"float", "F16", ops.PeakF32},
		{"float in a mix", "F32+Q8_0", ops.PeakF32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, ok := peakFor(loops, c.types)
			if !ok || l.Kind != c.kind {
				t.Errorf("peakFor(%q) = %q (%v), %v; want a %v loop", c.types, l.Name, l.Kind, ok, c.kind)
			}
		})
	}
}
