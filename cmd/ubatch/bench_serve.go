package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"ubatch/loadgen"
)

// benchServe drives a running server with a streaming workload (package loadgen) and reports
// throughput, time to first token and inter-token latency.
func benchServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench serve", "bench serve [--url http://127.0.0.1:8080] [--workload shared|mixed|tenants|chat|FILE.jsonl] [-n 64] [--clients 16] [--tenants 8] [--api-key KEY] [--json]", stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the server (requests go to URL/v1/completions)")
	workload := fs.String("workload", "shared", "shared or mixed (the file ../shared/perf/workloads/NAME.jsonl when present, else synthesized), tenants (synthesized: --tenants system prompts interleaved at random), chat (synthesized: conversations of 4 turns to /v1/chat/completions, each turn resending the history with the replies; a client runs one conversation at a time), or a .jsonl workload file")
	tenants := fs.Int("tenants", loadgen.DefaultTenants, "tenants workload: number of tenants, each with its own system prompt")
	systemWords := fs.Int("system-words", loadgen.DefaultSystemWords, "tenants workload: words in each tenant's system prompt")
	n := fs.IntP("requests", "n", 64, "requests to send, in workload order (cycling if the workload is shorter)")
	clients := fs.Int("clients", 16, "concurrent clients; each sends its next request as soon as the previous one ends")
	apiKey := fs.String("api-key", "", "send \"Authorization: Bearer KEY\"")
	modelName := fs.String("model", "", "model name to send (some servers require one)")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit per request, from sending to the end of its stream (0 = none)")
	seed := fs.Uint64("seed", 1, "seed of a synthesized workload")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, args, func() error { return atLeast("-n", *n, 1) }, func() error { return atLeast("--clients", *clients, 1) }); err != nil {
		return err
	}
	reqs, source, err := loadWorkload(*workload, *n, *seed)
	if *workload == loadgen.WorkloadTenants {
		reqs, err = loadgen.SynthesizeTenants(*n, *tenants, *systemWords, *seed)
		source = fmt.Sprintf("synthesized tenants workload (%d tenants, %d-word system prompts)", *tenants, *systemWords)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench serve: %d requests from %s, %d clients, %s\n", *n, source, *clients, *url)
	cfg := loadgen.Config{URL: *url, Model: *modelName, APIKey: *apiKey, Clients: *clients, Requests: *n, Timeout: *timeout}
	if !*asJSON {
		cfg.Progress = func(done, total int) {
			if done%max(total/8, 1) == 0 || done == total {
				fmt.Fprintf(stderr, "  %d/%d\n", done, total)
			}
		}
	}
	res, err := loadgen.Run(ctx, cfg, reqs)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil {
			return jerr
		}
	} else {
		res.WriteText(stdout)
	}
	if err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	if res.Errors > 0 {
		return fmt.Errorf("%d of %d requests failed (first: %s)", res.Errors, res.Requests, res.FirstError)
	}
	return nil
}

// loadWorkload reads a workload file, or for the names shared and mixed the shipped file when
// present and a synthesized workload of n requests otherwise. It also says where the requests
// came from.
func loadWorkload(name string, n int, seed uint64) ([]loadgen.Request, string, error) {
	if name == loadgen.WorkloadTenants {
		return nil, "", nil // synthesized by the caller with its flags
	}
	if name == loadgen.WorkloadChat {
		reqs, err := loadgen.Synthesize(name, n, seed)
		return reqs, "synthesized chat workload (conversations of 4 turns)", err
	}
	if name != loadgen.WorkloadShared && name != loadgen.WorkloadMixed {
		reqs, err := loadgen.LoadWorkload(name)
		return reqs, name, err
	}
	path := filepath.Join("..", "shared", "perf", "workloads", name+".jsonl")
	if _, err := os.Stat(path); err == nil {
		reqs, err := loadgen.LoadWorkload(path)
		return reqs, path, err
	}
	reqs, err := loadgen.Synthesize(name, n, seed)
	return reqs, "synthesized " + name + " workload", err
}
