package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/quant"
)

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
// them with the same instructions, so the logits files must be byte-identical.
func TestLogitsSameOnEveryKernelPath(t *testing.T) {
	paths := quant.KernelPaths()
	if len(paths) < 2 {
		t.Skipf("this CPU has one kernel path (%v): nothing to compare", paths)
	}
	defer func(old string) { _ = quant.SetKernelPath(old) }(quant.KernelPath())
	for _, name := range []string{"synth-tiny-q8_0.gguf", "synth-tiny-q4_0.gguf", "synth-tiny-q4_k_m.gguf", "synth-tiny-q6_k.gguf"} {
		t.Run(name, func(t *testing.T) {
			model := testdata.Model(t, name)
			var first []byte
			for _, p := range paths {
				if err := quant.SetKernelPath(p); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "logits.f32")
				code, _, errs := ubatch(t, "logits", "-m", model, "-p", "Once upon a time there was a little girl who liked to", "-o", out)
				if code != 0 {
					t.Fatalf("%s: exit %d: %s", p, code, errs)
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Fatalf("logits with kernel path %s differ from those with %s", p, paths[0])
				}
			}
		})
	}
}
