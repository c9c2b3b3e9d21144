package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// benchFormats are llama-bench's -o formats that ubatch bench prints (not sql).
var benchFormats = []string{"md", "json", "jsonl", "csv"}

// checkBenchFormat checks -o: llama-bench's formats; in --batched mode llama-batched-bench's
// (md, jsonl; json is taken as jsonl, its only JSON, as --json always was there).
func checkBenchFormat(format string, batched bool) error {
	switch {
	case batched && format != "md" && format != "json" && format != "jsonl":
		return fmt.Errorf("-o %s: use md or jsonl with --batched (llama-batched-bench's formats)", format)
	case !strings.Contains(" "+strings.Join(benchFormats, " ")+" ", " "+format+" "):
		return fmt.Errorf("-o %s: use %s (llama-bench's formats; sql is not supported)", format, strings.Join(benchFormats, ", "))
	}
	return nil
}

// benchPrinter prints llama-bench's rows in one of its formats, as llama-bench does: md, jsonl
// and csv row by row as the tests finish, json as one array at the end.
type benchPrinter struct {
	format string
	w      io.Writer
	rows   []benchRow
}

// begin prints what comes before the first row (md's header, csv's column names).
func (p *benchPrinter) begin() {
	switch p.format {
	case "md":
		fmt.Fprintf(p.w, "| %-30s | %10s | %10s | %-10s | %7s | %15s | %20s |\n", "model", "size", "params", "backend", "threads", "test", "t/s")
		fmt.Fprintf(p.w, "| %s | %s: | %s: | %s | %s: | %s: | %s: |\n", strings.Repeat("-", 30), strings.Repeat("-", 9), strings.Repeat("-", 9),
			strings.Repeat("-", 10), strings.Repeat("-", 6), strings.Repeat("-", 14), strings.Repeat("-", 19))
	case "csv":
		names, _ := csvFields(benchRow{})
		fmt.Fprintln(p.w, strings.Join(names, ","))
	}
}

// row prints one test's row (json keeps it for end).
func (p *benchPrinter) row(r benchRow) {
	switch p.format {
	case "md":
		fmt.Fprintf(p.w, "| %-30s | %6.2f MiB | %10s | %-10s | %7d | %15s | %10.2f ± %7.2f |\n",
			truncate(r.ModelType, 30), float64(r.ModelSize)/(1<<20), benchParams(r.ModelNParams), r.Backends, r.NThreads, r.testName(), r.AvgTs, r.StddevTs)
	case "jsonl":
		line, _ := json.Marshal(r)
		fmt.Fprintln(p.w, string(line))
	case "csv":
		_, values := csvFields(r)
		for i, v := range values {
			values[i] = `"` + strings.ReplaceAll(v, `"`, `""`) + `"`
		}
		fmt.Fprintln(p.w, strings.Join(values, ","))
	case "json":
		p.rows = append(p.rows, r)
	}
}

// end prints what comes after the last row: json's array, md's build line.
func (p *benchPrinter) end() error {
	switch p.format {
	case "json":
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		return enc.Encode(append([]benchRow{}, p.rows...)) // [] rather than null when no test ran
	case "md":
		commit, number := buildCommit()
		fmt.Fprintf(p.w, "\nbuild: %s (%d)\n", commit, number)
	}
	return nil
}

// testName is llama-bench's name of the test: pp512, tg128, pp512 @ d4096.
func (r benchRow) testName() string {
	name := fmt.Sprintf("pp%d", r.NPrompt)
	if r.NGen > 0 {
		name = fmt.Sprintf("tg%d", r.NGen)
	}
	if r.NDepth > 0 {
		name += fmt.Sprintf(" @ d%d", r.NDepth)
	}
	return name
}

// benchParams is llama-bench's md params column: millions, or billions from 1e9.
func benchParams(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	}
	return fmt.Sprintf("%.2f M", float64(n)/1e6)
}

// csvFields are benchRow's JSON names and values in order, without the arrays (samples, shares),
// which llama-bench's csv leaves out too. Every column is there on every row, so that the
// columns line up.
func csvFields(r benchRow) (names, values []string) {
	v := reflect.ValueOf(r)
	t := v.Type()
	for i := range t.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Slice {
			continue
		}
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
		switch f.Kind() {
		case reflect.Float64:
			values = append(values, strconv.FormatFloat(f.Float(), 'f', 6, 64))
		default:
			values = append(values, fmt.Sprint(f.Interface()))
		}
	}
	return names, values
}

// buildCommit is llama-bench's build_commit and build_number: the short commit the binary was
// built from ("unknown" outside a checkout, as llama.cpp says), and 0, ubatch not numbering builds.
func buildCommit() (string, int) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" && len(kv.Value) >= 7 {
				return kv.Value[:7], 0
			}
		}
	}
	return "unknown", 0
}

// cpuInfo is llama-bench's cpu_info: the processor's model name.
var cpuInfo = sync.OnceValue(func() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
})
