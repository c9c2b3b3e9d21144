package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"ubatch/internal/testdata"
)

// TestServeVLLMMetrics: `ubatch serve` with two models exports the Gateway API Inference
// Extension's vLLM names once per model (model_name tells them apart, no series collides),
// beside the ubatch_* metrics.
func TestServeVLLMMetrics(t *testing.T) {
	p := startServeProc(t, nil, "-m", testdata.Model(t, "stories260K.gguf"), "-m", testdata.Model(t, "synth-tiny-q8_0.gguf"), "-c", "512", "-np", "2", "-t", "1")
	code, body := p.call(t, "/v1/models", "")
	var list struct{ Data []struct{ ID string } }
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Data) != 2 {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
		// A request loads the model (and shows it in /metrics) if it is not loaded yet.
		if code, body := p.call(t, "/v1/completions", `{"model":"`+m.ID+`","prompt":"a b","max_tokens":2}`); code != 200 {
			t.Fatalf("completion on %s: %d %s", m.ID, code, body)
		}
	}
	code, body = p.call(t, "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	slices.Sort(ids)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info", "vllm:cache_config_info"} {
		f := fams[name]
		if f == nil {
			t.Fatalf("%s missing from /metrics", name)
		}
		var got []string
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "model_name" {
					got = append(got, l.GetValue())
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("%s: model_name of its series %v, want one per model %v", name, got, ids)
		}
	}
	if fams["ubatch_sequences_waiting"] == nil {
		t.Error("ubatch_sequences_waiting missing beside the vLLM names")
	}
}
