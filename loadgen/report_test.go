package loadgen

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

func sampleResult() Result {
	ms := time.Millisecond
	return Result{
		Requests: 64, Errors: 1, Rejected: 2, FirstError: "HTTP 500: boom",
		Duration: 24 * time.Second, OutputTokens: 4096, OutputTokensPerSec: 170.67,
		TTFT:       Percentiles{N: 61, P50: 950 * ms, P90: 990 * ms, P99: 1020 * ms, Mean: 960 * ms, Max: 1100 * ms},
		TTFTShort:  Percentiles{N: 53, P50: 2210 * ms, P90: 3 * time.Second, P99: 3410 * ms, Mean: 2 * time.Second, Max: 4 * time.Second},
		TTFTLong:   Percentiles{N: 8, P50: 5 * time.Second, P90: 5 * time.Second, P99: 5 * time.Second, Mean: 5 * time.Second, Max: 5 * time.Second},
		InterToken: Percentiles{N: 3843, P50: 80 * ms, P90: 95 * ms, P99: 104 * ms, Mean: 82 * ms, Max: 1530 * ms},
	}
}

func TestResultJSON(t *testing.T) {
	raw, err := json.Marshal(sampleResult())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"requests": 64.0, "errors": 1.0, "rejected": 2.0, "first_error": "HTTP 500: boom",
		"duration_ns": 24e9, "output_tokens": 4096.0, "output_tokens_per_sec": 170.67,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	for _, k := range []string{"ttft", "ttft_short", "ttft_long", "ttft_followup", "inter_token"} {
		p, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("%s missing in %s", k, raw)
		}
		for _, f := range []string{"n", "p50_ns", "p90_ns", "p99_ns", "mean_ns", "max_ns"} {
			if _, ok := p[f]; !ok {
				t.Errorf("%s.%s missing", k, f)
			}
		}
	}
	if got := m["inter_token"].(map[string]any)["p99_ns"]; got != 104e6 {
		t.Errorf("inter_token.p99_ns = %v", got)
	}
	if len(m) != 17 {
		t.Errorf("%d top-level keys, want 17: %s", len(m), raw)
	}
	var back Result
	if err := json.Unmarshal(raw, &back); err != nil || back != sampleResult() {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestWriteText(t *testing.T) {
	tests := []struct {
		name    string
		r       Result
		want    []string
		notWant []string
	}{
		{name: "full", r: sampleResult(), want: []string{
			"requests", "64", "61 ok, 1 errors, 2 rejected", "24.00 s", "4096", "170.7 tok/s",
			"first error: HTTP 500: boom", "TTFT short", "2.21 s", "3.41 s", "TTFT long",
			"inter-token", "80 ms", "104 ms", "1.53 s",
		}},
		{name: "one kind, no error", r: func() Result {
			r := sampleResult()
			r.FirstError, r.TTFTLong = "", Percentiles{}
			return r
		}(), want: []string{"TTFT", "0.95 s"}, notWant: []string{"TTFT short", "TTFT long", "first error"}},
		{name: "nothing succeeded", r: Result{Requests: 2, Errors: 2, FirstError: "x"},
			want: []string{"0 ok, 2 errors", "inter-token", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.r.WriteText(&b)
			testkit.CheckText(t, "output", b.String(), tt.want, tt.notWant)
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{name: "seconds", d: 2210 * time.Millisecond, want: "2.21 s"},
		{name: "sub-second", d: 950 * time.Millisecond, want: "0.95 s"},
		{name: "tens of ms", d: 80400 * time.Microsecond, want: "80 ms"},
		{name: "below switch", d: 199 * time.Millisecond, want: "199 ms"},
		{name: "small ms", d: 1234 * time.Microsecond, want: "1.23 ms"},
		{name: "zero", d: 0, want: "0.00 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatDuration(tt.d); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
