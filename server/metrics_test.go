package server

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestMetricsExposition(t *testing.T) {
	e := newEnv(t, envOptions{})
	for range 2 {
		e.complete(map[string]any{"prompt": "Once upon a time there was a cat who liked to play with a ball", "max_tokens": 8, "temperature": 0})
	}
	resp, err := e.client.Get(e.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	tests := []struct {
		name string
		typ  dto.MetricType
		// check, when set, tests the value after two 8-token requests.
		check func(*dto.MetricFamily) bool
	}{
		{name: "ubatch_batch_utilization_ratio", typ: dto.MetricType_HISTOGRAM, check: histCount(1)},
		{name: "ubatch_kv_cache_usage_ratio", typ: dto.MetricType_GAUGE},
		{name: "ubatch_kv_cache_blocks", typ: dto.MetricType_GAUGE, check: func(f *dto.MetricFamily) bool {
			states := map[string]bool{}
			for _, m := range f.Metric {
				states[m.Label[0].GetValue()] = true
			}
			return len(f.Metric) == 3 && states["used"] && states["cached"] && states["free"]
		}},
		{name: "ubatch_prefix_cache_hit_tokens_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(1)},
		{name: "ubatch_prompt_tokens_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(2)},
		{name: "ubatch_prefix_cache_hit_ratio", typ: dto.MetricType_GAUGE},
		{name: "ubatch_time_per_output_token_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(2)},
		{name: "ubatch_queue_wait_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(2)},
		{name: "ubatch_requests_total", typ: dto.MetricType_COUNTER, check: func(f *dto.MetricFamily) bool {
			for _, m := range f.Metric {
				if m.Label[0].GetName() == "finish_reason" && m.Label[0].GetValue() == "length" {
					return m.Counter.GetValue() == 2
				}
			}
			return false
		}},
		{name: "ubatch_generation_tokens_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(16)},
		{name: "ubatch_time_to_first_token_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(2)},
		{name: "ubatch_inter_token_latency_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(14)},
		{name: "ubatch_sequences_running", typ: dto.MetricType_GAUGE},
		{name: "ubatch_sequences_waiting", typ: dto.MetricType_GAUGE},
		{name: "ubatch_preemptions_total", typ: dto.MetricType_COUNTER},
		{name: "ubatch_requests_rejected_total", typ: dto.MetricType_COUNTER},
		{name: "ubatch_step_duration_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := families[tc.name]
			if !ok {
				t.Fatalf("%s missing from /metrics", tc.name)
			}
			if f.GetType() != tc.typ || f.GetHelp() == "" {
				t.Fatalf("%s: type %v help %q, want type %v and a help text", tc.name, f.GetType(), f.GetHelp(), tc.typ)
			}
			if tc.check != nil && !tc.check(f) {
				t.Fatalf("%s has an unexpected value: %v", tc.name, f.Metric)
			}
		})
	}
}

func histCount(atLeast uint64) func(*dto.MetricFamily) bool {
	return func(f *dto.MetricFamily) bool { return f.Metric[0].Histogram.GetSampleCount() >= atLeast }
}

func counterAtLeast(v float64) func(*dto.MetricFamily) bool {
	return func(f *dto.MetricFamily) bool { return f.Metric[0].Counter.GetValue() >= v }
}
