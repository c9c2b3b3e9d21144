package server

import (
	"math"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"ubatch/engine"
)

func TestMetricsExposition(t *testing.T) {
	e := newEnv(t, envOptions{})
	for range 2 {
		e.Complete(map[string]any{"prompt": "Once upon a time there was a cat who liked to play with a ball", "max_tokens": 8, "temperature": 0})
	}
	resp, err := e.Client.Get(e.URL + "/metrics")
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
		{name: "ubatch_prefix_cache_lookup_tokens_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(2)},
		{name: "ubatch_prefix_cache_lookup_hit_tokens_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(1)},
		{name: "ubatch_prompt_tokens_computed_total", typ: dto.MetricType_COUNTER, check: counterAtLeast(2)},
		{name: "ubatch_request_latency_seconds", typ: dto.MetricType_HISTOGRAM, check: histCount(2)},
		{name: "ubatch_request_preemptions", typ: dto.MetricType_HISTOGRAM, check: histCount(2)},
		{name: "ubatch_step_token_budget", typ: dto.MetricType_GAUGE, check: func(f *dto.MetricFamily) bool { return f.Metric[0].Gauge.GetValue() > 0 }},
		{name: "ubatch_step_target_seconds", typ: dto.MetricType_GAUGE},
		{name: "ubatch_step_predicted_seconds", typ: dto.MetricType_GAUGE},
		{name: "ubatch_steps_total", typ: dto.MetricType_COUNTER, check: func(f *dto.MetricFamily) bool {
			total := 0.0
			for _, m := range f.Metric {
				total += m.Counter.GetValue()
			}
			return len(f.Metric) == 7 && total >= 2
		}},
		{name: "ubatch_sequences_running_bound", typ: dto.MetricType_GAUGE, check: func(f *dto.MetricFamily) bool { return f.Metric[0].Gauge.GetValue() >= 1 }},
		// Two requests one after the other: each step admitted all there was.
		{name: "ubatch_admission_stop", typ: dto.MetricType_GAUGE, check: func(f *dto.MetricFamily) bool {
			ones := 0
			for _, m := range f.Metric {
				if m.Gauge.GetValue() == 1 {
					ones++
					if m.Label[0].GetValue() != string(engine.AdmitQueueEmpty) {
						return false
					}
				}
			}
			return len(f.Metric) == 5 && ones == 1
		}},
		{name: "ubatch_admission_stops_total", typ: dto.MetricType_COUNTER, check: func(f *dto.MetricFamily) bool {
			total := 0.0
			for _, m := range f.Metric {
				total += m.Counter.GetValue()
			}
			return len(f.Metric) == 5 && total >= 2
		}},
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

// TestUtilizationBuckets: the ratio is tokens over the step's capacity (16 decoding slots of 16
// read 1 whatever the budget), a StepInfo without a capacity adds no sample, the bucket bounds
// are the decimals 0.1..1 and a full step counts in le="1" (with LinearBuckets it reached only
// +Inf, past le="0.9999999999999999").
func TestUtilizationBuckets(t *testing.T) {
	m := NewMetrics(nil)
	m.Step(engine.StepInfo{Tokens: 16, Budget: 192, Capacity: 16})
	m.Step(engine.StepInfo{Tokens: 19, Budget: 64, Capacity: 64}) // 0.297
	m.Step(engine.StepInfo{Tokens: 3, Budget: 64})                // not a step that ran: no sample
	var out dto.Metric
	if err := m.batchUtilization.Write(&out); err != nil {
		t.Fatal(err)
	}
	if n, sum := out.Histogram.GetSampleCount(), out.Histogram.GetSampleSum(); n != 2 || math.Abs(sum-(1+19.0/64)) > 1e-9 {
		t.Fatalf("%d samples summing to %v, want 2 summing to %v", n, sum, 1+19.0/64)
	}
	tests := []struct {
		name  string
		le    float64
		count uint64
	}{
		{name: "0.3", le: 0.3, count: 1},
		{name: "0.9", le: 0.9, count: 1},
		{name: "1", le: 1, count: 2},
	}
	bounds := map[float64]uint64{}
	for _, b := range out.Histogram.Bucket {
		bounds[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := bounds[tc.le]; !ok || got != tc.count {
				t.Fatalf("bucket le=%v: count %d (present %v), want %d; buckets %v", tc.le, got, ok, tc.count, bounds)
			}
		})
	}
}
