package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"ubatch/internal/testkit"
)

// scrapeFamilies GETs /metrics and parses it as Prometheus text.
func (e *testEnv) scrapeFamilies() map[string]*dto.MetricFamily {
	e.T.Helper()
	resp, err := e.Client.Get(e.URL + "/metrics")
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.T.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.T.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return fams
}

// labels returns m's labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestVLLMMetrics scrapes a real server for the names the Gateway API Inference Extension's
// pickers read: each is one gauge series with vLLM's labels, idle it reads no load, with one
// request holding the only slot and another queued it reads one running, one waiting and KV
// in use, and back to idle once both are gone.
func TestVLLMMetrics(t *testing.T) {
	e := newEnv(t, envOptions{maxRunning: 1})
	RegisterVLLM(e.reg, "stories", e.eng.Stats)
	wantLabels := map[string][]string{
		vllmWaiting:     {"model_name", "engine"},
		vllmRunning:     {"model_name", "engine"},
		vllmKVUsage:     {"model_name", "engine"},
		vllmLoRAInfo:    {"max_lora", "waiting_lora_adapters", "running_lora_adapters", "model_name"},
		vllmCacheConfig: {"block_size", "num_gpu_blocks", "enable_prefix_caching", "model_name", "engine"},
	}
	// values reads the three load gauges, checking every family's shape on the way.
	values := func(what string) (waiting, running, kv float64) {
		t.Helper()
		fams := e.scrapeFamilies()
		for name, want := range wantLabels {
			f, ok := fams[name]
			if !ok {
				t.Fatalf("%s: %s missing from /metrics", what, name)
			}
			if f.GetType() != dto.MetricType_GAUGE || len(f.Metric) != 1 || f.GetHelp() == "" {
				t.Fatalf("%s: %s is %v with %d series and help %q, want one gauge series with a help text", what, name, f.GetType(), len(f.Metric), f.GetHelp())
			}
			got := labels(f.Metric[0])
			for _, l := range want {
				if _, ok := got[l]; !ok && l != "waiting_lora_adapters" && l != "running_lora_adapters" {
					t.Fatalf("%s: %s lacks label %s: %v", what, name, l, got)
				}
			}
			if got["model_name"] != "stories" {
				t.Fatalf("%s: %s model_name %q, want stories", what, name, got["model_name"])
			}
		}
		g := func(name string) float64 { return fams[name].Metric[0].Gauge.GetValue() }
		return g(vllmWaiting), g(vllmRunning), g(vllmKVUsage)
	}
	fams := e.scrapeFamilies()
	lora := fams[vllmLoRAInfo].Metric[0]
	if l := labels(lora); l["max_lora"] != "0" || l["running_lora_adapters"] != "" || l["waiting_lora_adapters"] != "" {
		t.Fatalf("%s labels %v, want max_lora 0 and no adapters", vllmLoRAInfo, l)
	}
	if v := lora.Gauge.GetValue(); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("%s value %v, want the scrape's Unix time", vllmLoRAInfo, v)
	}
	cfg := labels(fams[vllmCacheConfig].Metric[0])
	st := e.eng.Stats()
	if cfg["block_size"] != strconv.Itoa(st.KV.BlockSize) || cfg["num_gpu_blocks"] != strconv.Itoa(st.KV.Total) || st.KV.Total == 0 {
		t.Fatalf("%s labels %v, want block_size %d num_gpu_blocks %d", vllmCacheConfig, cfg, st.KV.BlockSize, st.KV.Total)
	}

	if w, r, kv := values("idle"); w != 0 || r != 0 || kv != 0 {
		t.Fatalf("idle: waiting %v running %v kv %v, want all 0", w, r, kv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	blocker := e.Post(ctx, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true, "stream": true})
	defer blocker.Body.Close()
	readChunks(t, blocker.Body, 1)
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/completions", strings.NewReader(`{"prompt": "The cat sat", "max_tokens": 8}`))
		if resp, err := e.Client.Do(req); err == nil { // cancelled at the end: an error is expected
			resp.Body.Close()
		}
	}()
	testkit.Eventually(t, 10*time.Second, "one request running and one waiting", func() bool {
		st := e.eng.Stats()
		return st.Running == 1 && st.Waiting == 1
	})
	if w, r, kv := values("loaded"); w != 1 || r != 1 || kv <= 0 || kv > 1 {
		t.Fatalf("one running, one queued: waiting %v running %v kv %v, want 1, 1 and in (0, 1]", w, r, kv)
	}
	cancel()
	<-queued
	testkit.Eventually(t, 10*time.Second, "the engine to go idle", func() bool {
		st := e.eng.Stats()
		return st.Running == 0 && st.Waiting == 0
	})
	if w, r, kv := values("after"); w != 0 || r != 0 || kv != 0 {
		t.Fatalf("after both ended: waiting %v running %v kv %v, want all 0", w, r, kv)
	}
}
