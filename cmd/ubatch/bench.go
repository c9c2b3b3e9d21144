package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"ubatch/internal/cputime"
	"ubatch/model"
	"ubatch/ops"
	"ubatch/quant"
	"ubatch/runner"
)

// cmdBench measures throughput like llama-bench (pp/tg for one sequence) or, with --batched, like
// llama-batched-bench (B sequences, each a prompt then generated tokens). `bench serve` drives an
// HTTP server instead.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return benchServe(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("bench", "bench [-m MODEL] [-p 512] [-n 128] [-d 0] [-r 5] [-o md|json|jsonl|csv]\n       ubatch bench --batched [-m MODEL] [-npp 128] [-ntg 32] [-npl 1,2,4,8,16] [-o md|jsonl]\n       ubatch bench serve -h", stderr)
	var mf modelFlags
	mf.register(fs, runner.DefaultNBatch)
	// llama-bench's defaults, so that the same command line measures the same tests.
	pp := fs.StringP("n-prompt", "p", "512", "prompt lengths to test (comma-separated; 0 skips the pp test)")
	tg := fs.StringP("n-gen", "n", "128", "generation lengths to test (comma-separated; 0 skips the tg test)")
	depth := fs.StringP("n-depth", "d", "0", "depths to test at (comma-separated), as llama-bench's: each test runs after this many tokens are already in the KV cache (filled before the clock starts, every repetition); -c must hold depth plus the test's tokens")
	reps := fs.IntP("repetitions", "r", 5, "repetitions of each test (after one warm-up run)")
	batched := fs.Bool("batched", false, "llama-batched-bench mode: -npl sequences each with an -npp prompt and -ntg generated tokens")
	npp := fs.String("npp", "128", "batched mode: prompt tokens per sequence (comma-separated)")
	ntg := fs.String("ntg", "32", "batched mode: generated tokens per sequence (comma-separated)")
	npl := fs.String("npl", "1,2,4,8,16", "batched mode: numbers of parallel sequences (comma-separated)")
	format := fs.StringP("output", "o", "md", "output format, llama-bench's: md (a table), json (an array of rows), jsonl (a row a line), csv; with --batched llama-batched-bench's md or jsonl")
	asJSON := fs.Bool("json", false, "the same as -o json")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements to this file (inspect with go tool pprof)")
	membw := fs.Bool("membw", false, "measure the machine's memory read bandwidth with the same thread count (once first, then right before and after every tg repetition), and report each tg test's share of it: per repetition against the larger of its two neighbouring measurements, the median over repetitions")
	kernels := kernelsFlag(fs)
	peak := fs.Bool("peak", false, "measure this CPU's peak int8 and f32 multiply-add throughput (the kernels' roofline: one loop per instruction of each kernel path), per core and on -t threads, and exit; the pp tests report their GEMM's share of it anyway")
	checkFormat := func() error {
		if *asJSON && !fs.Changed("output") {
			*format = "json"
		}
		if *batched && fs.Changed("n-depth") {
			return fmt.Errorf("-d: depth tests are llama-bench's, not --batched's: drop -d or --batched")
		}
		return checkBenchFormat(*format, *batched)
	}
	if err := parse(fs, args, mf.check, checkFormat, func() error { return atLeast("-r", *reps, 1) }); err != nil {
		return err
	}
	restoreKernels, err := useKernels(*kernels)
	if err != nil {
		return err
	}
	defer restoreKernels()
	if *peak {
		return benchPeak(stdout, threads(mf.threads))
	}
	var bandwidth func() float64 // bytes per second; nil without --membw
	if *membw {
		buf, n := make([]uint64, 64<<20), threads(mf.threads) // 512 MiB
		bandwidth = func() float64 { return ops.ReadBandwidth(buf, n, 5) }
		msg := stdout
		if *format != "md" {
			msg = stderr // keep stdout parseable
		}
		fmt.Fprintf(msg, "memory read bandwidth: %.1f GB/s (%d threads, 512 MiB streamed, best of 5)\n\n", bandwidth()/1e9, n)
	}
	m, done, err := mf.openProfiled(ctx, stderr, *cpuProfile)
	if err != nil {
		return err
	}
	defer done()
	if *batched {
		lists, err := intLists(*npp, *ntg, *npl)
		if err != nil {
			return err
		}
		return benchBatched(ctx, m, &mf, lists[0], lists[1], lists[2], *format != "md", stdout, stderr)
	}
	lists, err := intLists(*pp, *tg, *depth)
	if err != nil {
		return err
	}
	return benchSingle(ctx, m, &mf, benchTests(lists[0], lists[1], lists[2]), *reps, &benchPrinter{format: *format, w: stdout}, bandwidth, stdout)
}

func intLists(specs ...string) ([][]int, error) {
	var out [][]int
	for _, spec := range specs {
		var l []int
		for _, f := range strings.Split(spec, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v < 0 {
				return nil, fmt.Errorf("bad number %q in list %q", f, spec)
			}
			l = append(l, v)
		}
		out = append(out, l)
	}
	return out, nil
}

// benchRow carries llama-bench's JSON field names.
type benchRow struct {
	BuildCommit   string    `json:"build_commit"`
	BuildNumber   int       `json:"build_number"`
	CPUInfo       string    `json:"cpu_info"`
	GPUInfo       string    `json:"gpu_info"`
	Backends      string    `json:"backends"`
	ModelFilename string    `json:"model_filename"`
	ModelType     string    `json:"model_type"`
	ModelSize     int64     `json:"model_size"`
	ModelNParams  int64     `json:"model_n_params"`
	NBatch        int       `json:"n_batch"`
	NUBatch       int       `json:"n_ubatch"`
	NThreads      int       `json:"n_threads"`
	TypeK         string    `json:"type_k"`
	TypeV         string    `json:"type_v"`
	NPrompt       int       `json:"n_prompt"`
	NGen          int       `json:"n_gen"`
	NDepth        int       `json:"n_depth"` // tokens in the cache before the test (-d)
	TestTime      string    `json:"test_time"`
	AvgNs         int64     `json:"avg_ns"`
	StddevNs      int64     `json:"stddev_ns"`
	AvgTs         float64   `json:"avg_ts"`
	StddevTs      float64   `json:"stddev_ts"`
	SamplesNs     []int64   `json:"samples_ns"`
	SamplesTs     []float64 `json:"samples_ts"`
	PeakRSS       int64     `json:"peak_rss_bytes"`
	// tg tests: weight bytes one token reads and the rate that makes; with --membw, the read
	// bandwidth around the repetitions and the rate's share of it (medians, see
	// shareOfBandwidth) and every repetition's share.
	WeightBytes     int64     `json:"weight_bytes_per_token,omitempty"`
	GBps            float64   `json:"weight_gbps,omitempty"`
	ReadGBps        float64   `json:"read_gbps,omitempty"`
	BandwidthShare  float64   `json:"bandwidth_share,omitempty"`
	BandwidthShares []float64 `json:"bandwidth_shares,omitempty"`
	// Mixture-of-experts models: the experts per layer and the mean number of distinct experts
	// a step read per layer (its tokens' choices together), over the test's repetitions.
	Experts     int     `json:"n_experts,omitempty"`
	ExpertsRead float64 `json:"experts_read_per_layer,omitempty"`
	KernelPath  string  `json:"kernel_path"`
	// CPUNs is ubatch's own: the process's CPU time (user + system, all threads) over the timed
	// part of each repetition (the depth's prefill left out), for rates on a machine shared with
	// other work, where it moves far less than the wall time (see printCPURates).
	CPUNs []int64 `json:"samples_cpu_ns,omitempty"`
}

// weightBytes is what one decode step reads of the weights: every matrix once (a tied
// embedding once, as the output), but of a mixture-of-experts model's stacked expert tensors
// (*_exps.weight) only expertsRead of the experts of each layer.
func weightBytes(m *model.Model, expertsRead float64) int64 {
	var n int64
	seen := map[*runner.Weight]bool{}
	for _, w := range m.Graph.Matrices() {
		if !seen[w] {
			seen[w] = true
			n += int64(len(w.Data))
		}
	}
	if e := m.Hparams().NExperts; e > 0 {
		var exps int64
		for _, t := range m.File.Tensors {
			if strings.HasSuffix(t.Name, "_exps.weight") {
				exps += int64(t.Size)
			}
		}
		n -= int64(float64(exps) * (1 - expertsRead/float64(e)))
	}
	return n
}

// shareOfBandwidth sets a tg row's --membw figures from the read bandwidth measured before each
// of its repetitions and after the last (len(read) == len(row.SamplesTs)+1, bytes per second).
// The machine's bandwidth is not one number: on a shared VM it moves between readings seconds
// apart (on the AMD EPYC CI machine two threads mostly read ~33 GB/s and now and then ~54, as
// if the two vCPUs had moved to separate cores), so a repetition is compared with the larger of
// its two neighbouring readings, not with the best of the whole run, a moment it may not have
// had. The row reports the medians; the shares of every repetition are in BandwidthShares.
func shareOfBandwidth(row *benchRow, read []float64) {
	refs := make([]float64, len(row.SamplesTs))
	row.BandwidthShares = make([]float64, len(refs))
	for i, ts := range row.SamplesTs {
		refs[i] = max(read[i], read[i+1])
		row.BandwidthShares[i] = float64(row.WeightBytes) * ts / refs[i]
	}
	row.ReadGBps = median(refs) / 1e9
	row.BandwidthShare = median(row.BandwidthShares)
}

// median of x (the mean of the middle two for an even count); x is not modified.
func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// benchTest is one llama-bench test: a prompt of pp tokens or tg generated ones, after depth
// tokens in the cache.
type benchTest struct{ pp, tg, depth int }

// benchTests lists llama-bench's tests in its order: for each depth, the prompt lengths, then the
// generation lengths (0 skips).
func benchTests(pps, tgs, depths []int) []benchTest {
	var tests []benchTest
	for _, d := range depths {
		for _, p := range pps {
			if p > 0 {
				tests = append(tests, benchTest{pp: p, depth: d})
			}
		}
		for _, g := range tgs {
			if g > 0 {
				tests = append(tests, benchTest{tg: g, depth: d})
			}
		}
	}
	return tests
}

func benchSingle(ctx context.Context, m *model.Model, mf *modelFlags, tests []benchTest, reps int, out *benchPrinter, bandwidth func() float64, stdout io.Writer) error {
	need := 0
	for _, tc := range tests {
		need = max(need, tc.depth+tc.pp+tc.tg)
	}
	lctx, err := mf.newContext(m, 1, func(o *runner.Options) {
		if o.NCtx == 0 {
			o.NCtx = need + o.BlockSize
		}
	})
	if err != nil {
		return err
	}
	defer lctx.Close()
	if n := lctx.Options().NCtx; need > n {
		return fmt.Errorf("-c %d: a test needs %d tokens of KV cache (depth plus its prompt or generated tokens): give -c %d or more", n, need, need)
	}
	var rows []benchRow
	var gemms []gemmCount
	out.begin()
	loop, err := newLoop(lctx, 1)
	if err != nil {
		return err
	}
	br := &benchRunner{loop: loop, rng: rand.New(rand.NewPCG(1, 2)), vocab: int32(m.Hparams().Vocab)}
	for _, tc := range tests {
		run := func() (time.Duration, error) { return br.run(tc) }
		if _, err := run(); err != nil { // warm-up
			return err
		}
		row := newBenchRow(m, lctx, tc.pp, tc.tg)
		row.NDepth = tc.depth
		measure := tc.tg > 0 && bandwidth != nil
		var read []float64
		gemm := runner.GEMMStats{Tokens: gemmMinTokens}
		if tc.pp > 0 {
			lctx.CountGEMM(&gemm)
		}
		l0, r0 := lctx.ExpertsRead()
		for range reps {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if measure {
				read = append(read, bandwidth())
			}
			cpu0 := br.cpu
			d, err := run()
			if err != nil {
				return err
			}
			row.CPUNs = append(row.CPUNs, (br.cpu - cpu0).Nanoseconds())
			row.SamplesNs = append(row.SamplesNs, d.Nanoseconds())
			row.SamplesTs = append(row.SamplesTs, float64(tc.pp+tc.tg)/d.Seconds())
		}
		lctx.CountGEMM(nil)
		if l, r := lctx.ExpertsRead(); l > l0 {
			row.Experts, row.ExpertsRead = m.Hparams().NExperts, float64(r-r0)/float64(l-l0)
		}
		if tc.pp > 0 {
			gemms = append(gemms, gemmCount{test: row.testName(), stats: gemm.Stats()})
		}
		row.AvgNs, row.StddevNs = meanStd64(row.SamplesNs)
		row.AvgTs, row.StddevTs = meanStd(row.SamplesTs)
		row.PeakRSS = peakRSS()
		if tc.tg > 0 {
			row.WeightBytes = weightBytes(m, row.ExpertsRead)
			row.GBps = float64(row.WeightBytes) * row.AvgTs / 1e9
			if measure {
				shareOfBandwidth(&row, append(read, bandwidth()))
			}
		}
		rows = append(rows, row)
		out.row(row)
	}
	if err := out.end(); err != nil || out.format != "md" {
		return err
	}
	printSingleSummary(stdout, m, rows, gemms, threads(mf.threads))
	return nil
}

// benchRunner runs the repetitions of benchSingle's tests on a one-sequence loop, with random
// tokens as llama-bench's.
type benchRunner struct {
	loop  *runner.Loop
	rng   *rand.Rand
	vocab int32
	cpu   time.Duration // process CPU time of the timed parts of the repetitions so far
}

func (b *benchRunner) tokens(n int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = b.rng.Int32N(b.vocab)
	}
	return toks
}

// run runs tc once from an empty sequence: its depth's context (not timed), then its prompt and
// its generated tokens (each step decodes a random token; the logits are not read), and returns
// the time of the latter.
func (b *benchRunner) run(tc benchTest) (time.Duration, error) {
	b.loop.Reset()
	if tc.depth > 0 {
		if err := b.loop.Prompt(seq0, b.tokens(tc.depth), nil); err != nil {
			return 0, err
		}
	}
	start, cpu0 := time.Now(), cputime.Process()
	defer func() { b.cpu += cputime.Process() - cpu0 }()
	if tc.pp > 0 {
		if err := b.loop.Prompt(seq0, b.tokens(tc.pp), nil); err != nil {
			return 0, err
		}
	}
	random := func(int, []float32) (int32, bool, error) { return b.rng.Int32N(b.vocab), true, nil }
	for range tc.tg {
		if _, err := b.loop.Step(random); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// printSingleSummary prints what follows the md table: memory, kernels, the tg tests' weight
// rates and bandwidth shares, every test's rate by CPU time and the pp tests' GEMM shares.
func printSingleSummary(stdout io.Writer, m *model.Model, rows []benchRow, gemms []gemmCount, threads int) {
	fmt.Fprintf(stdout, "\npeak RSS: %.1f MiB (model file %.1f MiB)\n%s\n", float64(peakRSS())/(1<<20), float64(m.Size)/(1<<20), modelKernels(m))
	for _, r := range rows {
		if r.WeightBytes > 0 {
			fmt.Fprintf(stdout, "tg%d: %.1f MiB of weights per token, %.1f GB/s", r.NGen, float64(r.WeightBytes)/(1<<20), r.GBps)
			if r.BandwidthShare > 0 {
				fmt.Fprintf(stdout, ", %.0f%% of the read bandwidth measured around each repetition (median %.1f GB/s; repetitions %.0f-%.0f%%)",
					100*r.BandwidthShare, r.ReadGBps, 100*slices.Min(r.BandwidthShares), 100*slices.Max(r.BandwidthShares))
			}
			fmt.Fprintln(stdout)
		}
	}
	printExperts(stdout, m, rows)
	printCPURates(stdout, rows, threads)
	printGEMMShares(stdout, gemms, threads)
}

// printExperts says, for a mixture-of-experts model, how many experts each test's steps read
// per layer: K for one token, up to all of them for a prompt.
func printExperts(stdout io.Writer, m *model.Model, rows []benchRow) {
	h := m.Hparams()
	if h.NExperts == 0 {
		return
	}
	fmt.Fprintf(stdout, "experts: %d per layer, %d used per token; read per layer per step:", h.NExperts, h.NExpertsUsed)
	for _, r := range rows {
		fmt.Fprintf(stdout, " %s %.1f", r.testName(), r.ExpertsRead)
	}
	fmt.Fprintln(stdout)
}

func newBenchRow(m *model.Model, lctx *runner.Runtime, np, ng int) benchRow {
	var size, params int64
	for _, t := range m.File.Tensors {
		size += int64(t.Size)
		params += int64(t.NumElements())
	}
	o := lctx.Options()
	kv := strings.ToLower(o.KVType.String()) // llama-bench's type_k names: f16, f32, q8_0
	commit, number := buildCommit()
	return benchRow{
		BuildCommit: commit, BuildNumber: number, CPUInfo: cpuInfo(), Backends: "CPU",
		ModelFilename: m.Path, ModelType: fmt.Sprintf("%s %s", m.Arch, humanCount(params)), ModelSize: size, ModelNParams: params,
		NBatch: o.NBatch, NUBatch: o.NUBatch, NThreads: threads(o.Threads), TypeK: kv, TypeV: kv,
		NPrompt: np, NGen: ng, TestTime: time.Now().UTC().Format(time.RFC3339), KernelPath: quant.KernelPath(),
	}
}

func threads(t int) int {
	if t <= 0 {
		return runtime.NumCPU()
	}
	return t
}

func meanStd(x []float64) (float64, float64) {
	var s float64
	for _, v := range x {
		s += v
	}
	mean := s / float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}

func meanStd64(x []int64) (int64, int64) {
	f := make([]float64, len(x))
	for i, v := range x {
		f[i] = float64(v)
	}
	m, s := meanStd(f)
	return int64(m), int64(s)
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.2f K", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n+3:]
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes, 0 if unknown.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
