package loadgen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

func TestLoadWorkloadShipped(t *testing.T) {
	dir := testdata.Path(t, "perf/workloads")
	tests := []struct {
		name      string
		file      string
		wantLong  []int // indices of long requests
		minWords  int   // of every short prompt
		sharedPre bool  // all prompts share a 200-word prefix
	}{
		{name: "shared", file: "shared.jsonl", wantLong: nil, minWords: 220, sharedPre: true},
		{name: "mixed", file: "mixed.jsonl", wantLong: []int{0, 8, 16, 24, 32, 40, 48, 56}, minWords: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := LoadWorkload(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != 64 {
				t.Fatalf("%d requests, want 64", len(reqs))
			}
			var long []int
			for i, r := range reqs {
				if r.MaxTokens != 64 {
					t.Errorf("request %d: max_tokens %d, want 64", i, r.MaxTokens)
				}
				if r.Kind == KindLong {
					long = append(long, i)
					continue
				}
				if n := len(strings.Fields(r.Prompt)); n < tt.minWords {
					t.Errorf("request %d: %d words, want >= %d", i, n, tt.minWords)
				}
			}
			if !slices.Equal(long, tt.wantLong) {
				t.Errorf("long requests at %v, want %v", long, tt.wantLong)
			}
			if tt.sharedPre {
				pre := strings.Join(strings.Fields(reqs[0].Prompt)[:200], " ")
				for i, r := range reqs {
					if strings.Join(strings.Fields(r.Prompt)[:200], " ") != pre {
						t.Fatalf("request %d does not share the 200-word prefix", i)
					}
				}
			}
		})
	}
}

func TestLoadWorkloadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string // substring; "" means success
		wantN   int
	}{
		{name: "ok with blank lines", wantN: 2,
			content: "\n{\"kind\":\"short\",\"prompt\":\"a b\",\"max_tokens\":4}\n\n  \n{\"kind\":\"long\",\"prompt\":\"c\",\"max_tokens\":1}"},
		{name: "crlf lines", wantN: 1, content: "{\"kind\":\"short\",\"prompt\":\"a\",\"max_tokens\":4}\r\n"},
		{name: "empty file", content: "", wantErr: "no requests"},
		{name: "only blank lines", content: "\n\n \n", wantErr: "no requests"},
		{name: "bad json", content: "{\"kind\":\"short\",", wantErr: ":1:"},
		{name: "trailing garbage", content: "{\"kind\":\"short\",\"prompt\":\"a\",\"max_tokens\":4} x", wantErr: ":1:"},
		{name: "bad kind on line 2", wantErr: ":2: kind \"medium\"",
			content: "{\"kind\":\"short\",\"prompt\":\"a\",\"max_tokens\":4}\n{\"kind\":\"medium\",\"prompt\":\"a\",\"max_tokens\":4}"},
		{name: "missing kind", content: "{\"prompt\":\"a\",\"max_tokens\":4}", wantErr: "kind"},
		{name: "empty prompt", content: "{\"kind\":\"short\",\"prompt\":\"\",\"max_tokens\":4}", wantErr: "empty prompt"},
		{name: "zero max_tokens", content: "{\"kind\":\"short\",\"prompt\":\"a\",\"max_tokens\":0}", wantErr: "max_tokens 0"},
		{name: "wrong type", content: "{\"kind\":\"short\",\"prompt\":\"a\",\"max_tokens\":\"4\"}", wantErr: ":1:"},
		{name: "not an object", content: "[1,2]", wantErr: ":1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			reqs, err := LoadWorkload(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(reqs) != tt.wantN {
					t.Errorf("%d requests, want %d", len(reqs), tt.wantN)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := LoadWorkload(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestSynthesize(t *testing.T) {
	tests := []struct {
		name string
		kind string
		n    int
	}{
		{name: "shared", kind: WorkloadShared, n: 64},
		{name: "mixed", kind: WorkloadMixed, n: 64},
		{name: "mixed not a multiple of 8", kind: WorkloadMixed, n: 13},
		{name: "one", kind: WorkloadShared, n: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := Synthesize(tt.kind, tt.n, 42)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != tt.n {
				t.Fatalf("%d requests, want %d", len(reqs), tt.n)
			}
			seen := map[string]bool{}
			var prefix string
			for i, r := range reqs {
				if err := r.validate(); err != nil {
					t.Fatalf("request %d invalid: %v", i, err)
				}
				if r.MaxTokens != 64 {
					t.Errorf("request %d: max_tokens %d", i, r.MaxTokens)
				}
				if seen[r.Prompt] {
					t.Errorf("request %d repeats a prompt", i)
				}
				seen[r.Prompt] = true
				words := strings.Fields(r.Prompt)
				switch tt.kind {
				case WorkloadShared:
					pre, q, ok := strings.Cut(r.Prompt, "\nQuestion: ")
					if !ok || r.Kind != KindShort || len(strings.Fields(pre)) != 200 || len(strings.Fields(q)) != 20 {
						t.Fatalf("request %d: kind %s, want a short 200-word prefix + question: %q", i, r.Kind, r.Prompt)
					}
					if i == 0 {
						prefix = pre
					} else if pre != prefix {
						t.Errorf("request %d has a different prefix", i)
					}
				case WorkloadMixed:
					wantKind, wantWords := KindShort, 20
					if i%8 == 0 {
						wantKind, wantWords = KindLong, 600
					}
					if r.Kind != wantKind || len(words) != wantWords {
						t.Errorf("request %d: %s with %d words, want %s with %d", i, r.Kind, len(words), wantKind, wantWords)
					}
				}
			}
		})
	}
}

func TestSynthesizeSeeded(t *testing.T) {
	a, _ := Synthesize(WorkloadMixed, 16, 1)
	b, _ := Synthesize(WorkloadMixed, 16, 1)
	c, _ := Synthesize(WorkloadMixed, 16, 2)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, request %d differs", i)
		}
	}
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Error("different seeds gave the same workload")
	}
}

func TestSynthesizeErrors(t *testing.T) {
	tests := []struct {
		name string
		kind string
		n    int
	}{
		{name: "unknown kind", kind: "long", n: 4},
		{name: "zero", kind: WorkloadShared, n: 0},
		{name: "negative", kind: WorkloadMixed, n: -1},
		{name: "too many", kind: WorkloadMixed, n: 1 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Synthesize(tt.kind, tt.n, 0); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestSynthesizeTenants(t *testing.T) {
	reqs, err := SynthesizeTenants(400, 8, 50, 3)
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]int{}
	seen := map[string]bool{}
	switches := 0
	prev := ""
	for _, r := range reqs {
		sys, q, ok := strings.Cut(r.Prompt, "\nUser ")
		if !ok || r.MaxTokens != synthMaxTokens || r.Kind != KindShort {
			t.Fatalf("bad request %+v", r)
		}
		if len(strings.Fields(sys)) != 52 { // "Tenant N." + 50 words
			t.Fatalf("system prompt of %d words", len(strings.Fields(sys)))
		}
		if seen[q] {
			t.Fatalf("question repeated: %q", q)
		}
		seen[q] = true
		prefixes[sys]++
		if sys != prev {
			switches++
		}
		prev = sys
	}
	if len(prefixes) != 8 {
		t.Fatalf("%d distinct system prompts, want 8", len(prefixes))
	}
	for p, n := range prefixes {
		if n < 25 { // 50 expected each
			t.Fatalf("tenant %.20q has only %d of 400 requests", p, n)
		}
	}
	if switches < 300 { // random interleaving switches tenant 7 times in 8
		t.Fatalf("only %d tenant switches in 400 requests: not interleaved", switches)
	}
	again, _ := SynthesizeTenants(400, 8, 50, 3)
	if !slices.Equal(again, reqs) {
		t.Fatal("not deterministic")
	}
	viaName, err := Synthesize(WorkloadTenants, 10, 3)
	if err != nil || len(viaName) != 10 {
		t.Fatalf("Synthesize(tenants): %v", err)
	}
	for _, bad := range [][3]int{{0, 8, 10}, {10, 0, 10}, {10, 8, 0}, {10, 1001, 10}} {
		if _, err := SynthesizeTenants(bad[0], bad[1], bad[2], 1); err == nil {
			t.Fatalf("accepted %v", bad)
		}
	}
}
