package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// llamaBenchFields are llama-bench's JSON fields that apply to a CPU run, in its order.
var llamaBenchFields = []string{"build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
	"model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k", "type_v",
	"n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts"}

func fixedRows() []benchRow {
	base := benchRow{BuildCommit: "abc1234", CPUInfo: "Test CPU", Backends: "CPU", ModelFilename: "m.gguf", ModelType: "llama 1.00 M",
		ModelSize: 3 << 20, ModelNParams: 1_500_000, NBatch: 2048, NUBatch: 512, NThreads: 2, TypeK: "f16", TypeV: "f16",
		TestTime: "2026-01-02T03:04:05Z", KernelPath: "avx2"}
	pp, tg := base, base
	pp.NPrompt, pp.AvgNs, pp.AvgTs, pp.StddevTs, pp.SamplesNs, pp.SamplesTs = 512, 1e9, 512, 1.5, []int64{1e9}, []float64{512}
	tg.NGen, tg.AvgNs, tg.AvgTs, tg.SamplesNs, tg.SamplesTs, tg.WeightBytes = 128, 2e9, 64, []int64{2e9}, []float64{64}, 1<<20
	return []benchRow{pp, tg}
}

func printRows(format string, rows []benchRow) string {
	var b bytes.Buffer
	p := &benchPrinter{format: format, w: &b}
	p.begin()
	for _, r := range rows {
		p.row(r)
	}
	p.end()
	return b.String()
}

// TestBenchFormats: -o json, jsonl, csv and md print llama-bench's layouts with its field names,
// in its order.
func TestBenchFormats(t *testing.T) {
	rows := fixedRows()
	checkKeys := func(t *testing.T, raw []byte) map[string]any {
		t.Helper()
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		last := -1
		for _, k := range llamaBenchFields {
			at := bytes.Index(raw, []byte(`"`+k+`":`))
			if _, ok := obj[k]; !ok || at < last {
				t.Errorf("field %s missing or out of llama-bench's order", k)
			}
			last = at
		}
		return obj
	}
	t.Run("json", func(t *testing.T) {
		out := printRows("json", rows)
		var arr []json.RawMessage
		if err := json.Unmarshal([]byte(out), &arr); err != nil || len(arr) != 2 {
			t.Fatalf("%v, %d rows: %s", err, len(arr), out)
		}
		if obj := checkKeys(t, arr[1]); obj["n_gen"] != 128.0 || obj["avg_ts"] != 64.0 {
			t.Errorf("tg row %v", obj)
		}
		if out := printRows("json", nil); strings.TrimSpace(out) != "[]" {
			t.Errorf("no rows: %q, want []", out)
		}
	})
	t.Run("jsonl", func(t *testing.T) {
		lines := strings.Split(strings.TrimSuffix(printRows("jsonl", rows), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("%d lines, want 2", len(lines))
		}
		if obj := checkKeys(t, []byte(lines[0])); obj["n_prompt"] != 512.0 {
			t.Errorf("pp row %v", obj)
		}
	})
	t.Run("csv", func(t *testing.T) {
		lines := strings.Split(strings.TrimSuffix(printRows("csv", rows), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d lines, want a header and 2 rows", len(lines))
		}
		header := strings.Split(lines[0], ",")
		want := slices.DeleteFunc(slices.Clone(llamaBenchFields), func(s string) bool { return strings.HasPrefix(s, "samples_") })
		if !slices.Equal(header[:len(want)], want) {
			t.Errorf("header %v, want it to start with %v", header, want)
		}
		for _, row := range lines[1:] {
			cells := strings.Split(row, ",")
			if len(cells) != len(header) || cells[0] != `"abc1234"` {
				t.Errorf("row %q: %d cells for %d columns, every value quoted", row, len(cells), len(header))
			}
		}
		if !strings.Contains(lines[1], `"512.000000","1.500000"`) {
			t.Errorf("avg_ts, stddev_ts not as llama-bench prints them: %s", lines[1])
		}
	})
	t.Run("md", func(t *testing.T) {
		out := printRows("md", rows)
		want := "| model                          |       size |     params | backend    | threads |            test |                  t/s |\n" +
			"| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n" +
			"| llama 1.00 M                   |   3.00 MiB |     1.50 M | CPU        |       2 |           pp512 |     512.00 ±    1.50 |\n" +
			"| llama 1.00 M                   |   3.00 MiB |     1.50 M | CPU        |       2 |           tg128 |      64.00 ±    0.00 |\n"
		if !strings.HasPrefix(out, want) || !strings.Contains(out, "\nbuild: ") {
			t.Errorf("md:\n%s\nwant:\n%s", out, want)
		}
	})
}

// TestBenchDefaultsAreLlamaBench: ubatch bench's tests default to llama-bench's pp512, tg128 and
// 5 repetitions, as its --help says.
func TestBenchDefaultsAreLlamaBench(t *testing.T) {
	_, _, errs := ubatch(t, "bench", "--help")
	for _, want := range []string{`0 skips the pp test) (default "512")`, `0 skips the tg test) (default "128")`,
		"after one warm-up run) (default 5)", `-o, --output string`} {
		if !strings.Contains(errs, want) {
			t.Errorf("bench --help does not say %q", want)
		}
	}
}

// TestBenchJSONRun: a short real run prints llama-bench's JSON on stdout, nothing else.
func TestBenchJSONRun(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	for _, args := range [][]string{{"-o", "json"}, {"--json"}} {
		code, out, errs := ubatch(t, append([]string{"bench", "-m", model, "-p", "16", "-n", "8", "-r", "2", "-t", "1"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
			t.Fatalf("%v, %d rows:\n%s", err, len(rows), out)
		}
		if rows[0]["n_prompt"] != 16.0 || rows[1]["n_gen"] != 8.0 || rows[1]["avg_ts"].(float64) <= 0 ||
			len(rows[0]["samples_ns"].([]any)) != 2 || rows[0]["backends"] != "CPU" {
			t.Errorf("rows %v", rows)
		}
	}
}
