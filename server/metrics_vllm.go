package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
)

// The vLLM names the Gateway API Inference Extension's endpoint pickers read by default (its
// model server protocol, docs/proposals/003-model-server-protocol): queue, running set and KV
// usage to score a pod, the LoRA info gauge for adapter affinity, the cache config info for the
// block size of prefix-aware scoring.
const (
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmRunning     = "vllm:num_requests_running"
	vllmKVUsage     = "vllm:kv_cache_usage_perc"
	vllmLoRAInfo    = "vllm:lora_requests_info"
	vllmCacheConfig = "vllm:cache_config_info"
)

// vllmCollector exports an engine's snapshot under vLLM's metric names, read at each scrape from
// the same engine.Stats the ubatch_* gauges show (one source of truth). Every series carries
// model_name (the served model's id) and engine ("0": one engine per model), as vLLM's do; the
// two info gauges carry model_name too, so that a process serving several models exposes one
// series of each per model instead of colliding.
type vllmCollector struct {
	model                           string
	stats                           func() engine.Stats
	waiting, running, kv, lora, cfg *prometheus.Desc
}

// RegisterVLLM registers on reg the five vLLM series of the model named model over stats (an
// engine's Stats): vllm:num_requests_waiting and vllm:num_requests_running (gauges, requests),
// vllm:kv_cache_usage_perc (gauge, 0..1: blocks held by sequences over all blocks, as vLLM's
// 1 - free/total with cached blocks counted free), vllm:lora_requests_info (gauge whose value is
// the scrape's Unix time, labels running_lora_adapters and waiting_lora_adapters empty and
// max_lora "0": no adapters, as vLLM without LoRA would report them) and vllm:cache_config_info
// (gauge 1, labels block_size, num_gpu_blocks, enable_prefix_caching). reg is the model's own
// registry, unwrapped, so the label set is vLLM's.
func RegisterVLLM(reg prometheus.Registerer, model string, stats func() engine.Stats) {
	base := []string{"model_name", "engine"}
	reg.MustRegister(&vllmCollector{
		model: model, stats: stats,
		waiting: prometheus.NewDesc(vllmWaiting, "Number of requests waiting to be processed (ubatch_sequences_waiting).", base, nil),
		running: prometheus.NewDesc(vllmRunning, "Number of requests in model execution batches (ubatch_sequences_running).", base, nil),
		kv:      prometheus.NewDesc(vllmKVUsage, "KV-cache usage, 1 means 100 percent usage (ubatch_kv_cache_usage_ratio).", base, nil),
		lora: prometheus.NewDesc(vllmLoRAInfo, "Running stats on lora requests: none, ubatch serves no adapters; the value is the scrape time.",
			[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters", "model_name"}, nil),
		cfg: prometheus.NewDesc(vllmCacheConfig, "Information of the KV cache: block_size in tokens, num_gpu_blocks the blocks of the pool.",
			append([]string{"block_size", "num_gpu_blocks", "enable_prefix_caching"}, base...), nil),
	})
}

// Describe implements prometheus.Collector.
func (c *vllmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.waiting, c.running, c.kv, c.lora, c.cfg} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *vllmCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	usage := 0.0
	if st.KV.Total > 0 {
		usage = float64(st.KV.Used) / float64(st.KV.Total)
	}
	const eng = "0"
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting), c.model, eng)
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(st.Running), c.model, eng)
	ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, usage, c.model, eng)
	// The pickers take the series with the latest time as the current one, as vLLM sets it.
	ch <- prometheus.MustNewConstMetric(c.lora, prometheus.GaugeValue, float64(time.Now().Unix()), "0", "", "", c.model)
	ch <- prometheus.MustNewConstMetric(c.cfg, prometheus.GaugeValue, 1,
		strconv.Itoa(st.KV.BlockSize), strconv.Itoa(st.KV.Total), "True", c.model, eng)
}
