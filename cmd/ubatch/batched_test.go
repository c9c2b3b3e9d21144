package main

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/model"
)

// TestBatchedPerfSummary: batched ends with llama.cpp's llama_perf_context_print lines, counting
// the prompt's tokens once, one eval run per generated token after the first (the last sampled
// token is not decoded), and the prompt and every sequence's tokens in the total.
func TestBatchedPerfSummary(t *testing.T) {
	path := testdata.Model(t, "stories260K.gguf")
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const prompt = "Once upon a time"
	nPrompt := len(m.Vocab.Encode(prompt, true, true))
	tests := []struct {
		name  string
		np, n int
	}{
		{name: "one sequence", np: 1, n: 3},
		{name: "three sequences", np: 3, n: 5},
		{name: "one token", np: 2, n: 1},
	}
	num := `\s+([0-9.]+)`
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := ubatch(t, "batched", "-m", path, "-p", prompt, "-np", strconv.Itoa(tc.np), "-n", strconv.Itoa(tc.n), "--ignore-eos")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			lines := []struct {
				re   string
				want int // the count after the "/", -1: none
			}{
				{`llama_perf_context_print:\s+load time =` + num + ` ms\n`, -1},
				{`llama_perf_context_print: prompt eval time =` + num + ` ms /\s+(\d+) tokens \(` + num + ` ms per token,` + num + ` tokens per second\)\n`, nPrompt},
				{`llama_perf_context_print:\s+eval time =` + num + ` ms /\s+(\d+) runs\s+\(` + num + ` ms per token,` + num + ` tokens per second\)\n`, tc.n - 1},
				{`llama_perf_context_print:\s+total time =` + num + ` ms /\s+(\d+) tokens\n`, nPrompt + tc.np*tc.n},
			}
			for _, l := range lines {
				got := regexp.MustCompile(l.re).FindStringSubmatch(errs)
				if got == nil {
					t.Errorf("no line matching %s in:\n%s", l.re, errs)
					continue
				}
				if l.want >= 0 && got[2] != fmt.Sprint(l.want) {
					t.Errorf("%q: count %s, want %d", got[0], got[2], l.want)
				}
			}
		})
	}
}
