package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/model"
)

func TestShareOfBandwidth(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name      string
		ts        []float64 // tokens per second of each repetition
		read      []float64 // bytes per second, before each repetition and after the last
		wantShare float64
		wantRead  float64 // GB/s
		wantEach  []float64
	}{
		{"steady", []float64{10, 10, 10}, []float64{1000 * mib, 1000 * mib, 1000 * mib, 1000 * mib}, 0.1, 1000 * mib / 1e9, []float64{0.1, 0.1, 0.1}},
		// A repetition next to a fast reading is compared with it, not with the slower one.
		{"a fast moment", []float64{10, 10, 10}, []float64{1000 * mib, 2000 * mib, 1000 * mib, 1000 * mib}, 0.05, 2000 * mib / 1e9, []float64{0.05, 0.05, 0.1}},
		{"even count takes the middle two", []float64{10, 20}, []float64{1000 * mib, 1000 * mib, 1000 * mib}, 0.15, 1000 * mib / 1e9, []float64{0.1, 0.2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row := benchRow{WeightBytes: 10 * mib, SamplesTs: tc.ts}
			shareOfBandwidth(&row, tc.read)
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
			if !near(row.BandwidthShare, tc.wantShare) || !near(row.ReadGBps, tc.wantRead) {
				t.Errorf("share %v, read %v GB/s; want %v, %v", row.BandwidthShare, row.ReadGBps, tc.wantShare, tc.wantRead)
			}
			for i, s := range row.BandwidthShares {
				if !near(s, tc.wantEach[i]) {
					t.Errorf("repetition %d share %v, want %v", i, s, tc.wantEach[i])
				}
			}
		})
	}
}

// TestBenchDepth: -d runs every test at every depth, llama-bench's order and names (n_depth,
// "pp16 @ d32"), and a -c that cannot hold depth plus the test is an error naming -c.
func TestBenchDepth(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	base := []string{"bench", "-m", model, "-p", "16", "-n", "4", "-d", "0,32", "-r", "1", "-t", "1"}
	code, out, errs := ubatch(t, append(base, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []benchRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	want := []benchTest{{pp: 16}, {tg: 4}, {pp: 16, depth: 32}, {tg: 4, depth: 32}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, r := range rows {
		if got := (benchTest{pp: r.NPrompt, tg: r.NGen, depth: r.NDepth}); got != want[i] || r.AvgTs <= 0 {
			t.Errorf("row %d: %+v at %v t/s, want %+v", i, got, r.AvgTs, want[i])
		}
	}
	if code, out, errs = ubatch(t, base...); code != 0 || !strings.Contains(out, "pp16 @ d32") || !strings.Contains(out, "tg4 @ d32") {
		t.Errorf("md: exit %d, %s\n%s", code, errs, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"context too small", []string{"-c", "32"}, "-c 32: a test needs 48 tokens"},
		{"batched", []string{"--batched"}, "-d: depth tests"},
		{"negative", []string{"-d", "-1"}, "bad number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := ubatch(t, append(base, tc.args...)...)
			if code == 0 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want an error with %q", code, errs, tc.want)
			}
		})
	}
}

// TestBenchExperts: on a mixture-of-experts model, bench reports the experts per layer, and a
// decode step reads exactly the K used of them per layer (its one token's), so that a tg row's
// weight bytes count K of the E experts; a prompt's tokens read more (at most E). info reports
// the counts from the file.
func TestBenchExperts(t *testing.T) {
	path := testdata.Model(t, "arch/synth-qwen3moe-q8_0.gguf")
	code, out, errs := ubatch(t, "bench", "-m", path, "-p", "32", "-n", "4", "-r", "1", "-t", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []benchRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%d rows, %v:\n%s", len(rows), err, out)
	}
	pp, tg := rows[0], rows[1]
	if pp.Experts != 8 || tg.Experts != 8 || tg.ExpertsRead != 2 || pp.ExpertsRead <= 2 || pp.ExpertsRead > 8 {
		t.Errorf("experts %d/%d, read per layer: pp %v, tg %v; want 8 experts, tg reading 2 and pp more, at most 8", pp.Experts, tg.Experts, pp.ExpertsRead, tg.ExpertsRead)
	}
	// The experts are 3 of the file's 6.7 MiB (4 layers x 3 x 8 x 192 x 256 Q8_0): a token reads
	// a quarter of them.
	const exps = 4 * 3 * 8 * 192 * 256 * 34 / 32
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	full := weightBytes(m, 8)
	if want := full - exps*3/4; tg.WeightBytes != int64(want) {
		t.Errorf("tg weight bytes %d, want %d (all %d less three quarters of the experts' %d)", tg.WeightBytes, want, full, exps)
	}
	if code, out, errs := ubatch(t, "info", "-m", path); code != 0 || !strings.Contains(out, "experts: 8 per layer, 2 used per token, FFN 192 each") {
		t.Errorf("info: exit %d, %s\n%s", code, errs, out)
	}
}

// TestBenchBatchedExperts: --batched reports the experts a tg step read per layer: exactly K
// for one sequence, more (at most E) for four decoding together.
func TestBenchBatchedExperts(t *testing.T) {
	path := testdata.Model(t, "arch/synth-qwen3moe-q8_0.gguf")
	code, out, errs := ubatch(t, "bench", "--batched", "-m", path, "-npp", "8", "-ntg", "4", "-npl", "1,4", "-t", "1", "-o", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []batchedRow
	for line := range strings.Lines(out) {
		var r batchedRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[0].ExpertsTG != 2 || rows[1].ExpertsTG <= 2 || rows[1].ExpertsTG > 8 {
		t.Fatalf("rows %+v: want B=1 reading 2 experts per layer per tg step, B=4 more, at most 8", rows)
	}
	if code, out, _ := ubatch(t, "bench", "--batched", "-m", path, "-npp", "8", "-ntg", "4", "-npl", "1", "-t", "1"); code != 0 ||
		!strings.Contains(out, "B=1: a tg step read 2.0 of the 8 experts per layer (2 used per token)") {
		t.Errorf("md: exit %d\n%s", code, out)
	}
}
