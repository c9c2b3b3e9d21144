package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/ops"
	"ubatch/quant"
)

// floats reads a logits file: little-endian float32s.
func floats(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// TestKernelsFlag runs bench with each kernel path this CPU has and checks that the output names
// it and that the start-up choice is back afterwards; a path the CPU lacks is a clear error.
func TestKernelsFlag(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	start := quant.KernelPath()
	for _, name := range append([]string{"auto"}, quant.KernelPaths()...) {
		t.Run(name, func(t *testing.T) {
			code, out, errs := ubatch(t, "bench", "-m", model, "-p", "8", "-n", "0", "-r", "1", "--kernels", name)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			want := name
			if name == "auto" {
				want = quant.KernelPaths()[0]
			}
			if !strings.Contains(out, "kernels: "+want+" ") {
				t.Errorf("bench output does not report kernel path %s:\n%s", want, out)
			}
			if quant.KernelPath() != start {
				t.Errorf("kernel path %s after bench, want the start-up %s back", quant.KernelPath(), start)
			}
		})
	}
	code, _, errs := ubatch(t, "bench", "-m", model, "-p", "8", "-n", "0", "--kernels", "sse9")
	if code == 0 || !strings.Contains(errs, `kernel path "sse9" is not available`) {
		t.Errorf("--kernels sse9: exit %d, stderr %s", code, errs)
	}
	code, out, errs := ubatch(t, "info", "-m", model)
	if code != 0 || !strings.Contains(out, "kernels: "+start+" (CPU has ") {
		t.Errorf("info: exit %d, does not report the kernel path:\n%s%s", code, out, errs)
	}
}

// TestLogitsSameOnEveryKernelPath runs the logits command on the shared models of each packed
// type with every kernel path this CPU has: the paths compute the same integer sums and scale
// them with the same instructions, so the logits files must be byte-identical among the paths
// with the same attention. The paths with the tiled attention (AVX-512: ops.AttnTiledFast) and
// those with the exact one (--tiled-attention is given: the paths without assembly for it
// ignore it) differ within the tiled attention's tolerance: there the logits
// must agree to 1e-4 of the largest (measured: below 1e-6 of 3.9).
func TestLogitsSameOnEveryKernelPath(t *testing.T) {
	paths := quant.KernelPaths()
	if len(paths) < 2 {
		t.Skipf("this CPU has one kernel path (%v): nothing to compare", paths)
	}
	defer func(old string) { _ = quant.SetKernelPath(old) }(quant.KernelPath())
	for _, name := range []string{"synth-tiny-q8_0.gguf", "synth-tiny-q4_0.gguf", "synth-tiny-q4_k_m.gguf", "synth-tiny-q6_k.gguf"} {
		t.Run(name, func(t *testing.T) {
			model := testdata.Model(t, name)
			first := map[bool][]byte{} // by tiled attention
			firstPath := map[bool]string{}
			for _, p := range paths {
				if err := quant.SetKernelPath(p); err != nil {
					t.Fatal(err)
				}
				tiled := ops.AttnTiledFast()
				out := filepath.Join(t.TempDir(), "logits.f32")
				code, _, errs := ubatch(t, "logits", "-m", model, "--tiled-attention", "-p", "Once upon a time there was a little girl who liked to", "-o", out)
				if code != 0 {
					t.Fatalf("%s: exit %d: %s", p, code, errs)
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if first[tiled] == nil {
					first[tiled], firstPath[tiled] = got, p
				} else if !bytes.Equal(got, first[tiled]) {
					t.Fatalf("logits with kernel path %s differ from those with %s", p, firstPath[tiled])
				}
			}
			if first[true] != nil && first[false] != nil {
				a, b := floats(first[true]), floats(first[false])
				var worst, big float64
				for i := range a {
					worst = max(worst, math.Abs(float64(a[i]-b[i])))
					big = max(big, math.Abs(float64(b[i])))
				}
				if len(a) != len(b) || worst > 1e-4*big {
					t.Errorf("logits with the tiled attention (%s) and the exact one (%s) differ by %g (largest %g)",
						firstPath[true], firstPath[false], worst, big)
				}
				t.Logf("tiled (%s) against exact (%s) attention: logits differ by at most %.3g (largest %.3g)", firstPath[true], firstPath[false], worst, big)
			}
		})
	}
}
