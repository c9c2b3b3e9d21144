package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"ubatch/internal/cputime"
	"ubatch/model"
	"ubatch/runner"
)

// batchedRow carries llama-batched-bench's JSON keys.
type batchedRow struct {
	PP      int     `json:"pp"`
	TG      int     `json:"tg"`
	PL      int     `json:"pl"`
	NKV     int     `json:"n_kv"`
	TPP     float64 `json:"t_pp"`
	SpeedPP float64 `json:"speed_pp"`
	TTG     float64 `json:"t_tg"`
	SpeedTG float64 `json:"speed_tg"`
	// CPUTG is the process's CPU time (user + system) over the tg steps, SpeedTGCPU pl·tg over
	// that time per thread: the rate the threads would reach with the cores to themselves
	// (ubatch's own figure, for a machine shared with other work).
	CPUTG      float64 `json:"cpu_tg,omitempty"`
	SpeedTGCPU float64 `json:"speed_tg_cpu,omitempty"`
	T          float64 `json:"t"`
	Speed      float64 `json:"speed"`
	// ExpertsTG is, for a mixture-of-experts model, the mean number of distinct experts a tg
	// step read per layer: what pl sequences' tokens chose together (ubatch's own figure).
	ExpertsTG float64 `json:"experts_read_tg,omitempty"`
}

// benchBatched runs, for every (pp, tg, pl): pl sequences each decode their own pp-token prompt
// (one logical batch), then tg steps that each decode one token for every sequence.
func benchBatched(ctx context.Context, m *model.Model, mf *modelFlags, npp, ntg, npl []int, asJSON bool, stdout, stderr io.Writer) error {
	maxPL, maxLen := 0, 0
	for _, v := range npl {
		maxPL = max(maxPL, v)
	}
	for _, p := range npp {
		for _, g := range ntg {
			maxLen = max(maxLen, p+g)
		}
	}
	if maxPL == 0 || maxLen == 0 {
		return fmt.Errorf("-npl, and -npp or -ntg, need a positive value")
	}
	lctx, err := mf.newContext(m, maxPL, func(o *runner.Options) {
		if o.NCtx == 0 {
			o.NCtx = maxPL * ((maxLen + o.BlockSize - 1) / o.BlockSize * o.BlockSize)
		}
	})
	if err != nil {
		return err
	}
	defer lctx.Close()
	if !asJSON {
		o := lctx.Options()
		fmt.Fprintf(stdout, "main: n_kv_max = %d, n_batch = %d, n_ubatch = %d, n_threads = %d, kv block = %d\n\n", o.NCtx, o.NBatch, o.NUBatch, threads(o.Threads), o.BlockSize)
		fmt.Fprintf(stdout, "|%6s |%6s |%4s |%6s |%8s |%8s |%8s |%8s |%8s |%8s |\n", "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s")
		fmt.Fprintf(stdout, "|-------|-------|-----|-------|---------|---------|---------|---------|---------|---------|\n")
	}
	// One Session for every measure: each loop resets its KV cache.
	sess, err := runner.NewSession(lctx)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(int, []float32) (int32, bool, error) { return rng.Int32N(int32(m.Hparams().Vocab)), true, nil }
	warm := true
	var rows []batchedRow // md: for the CPU-time summary
	var expTG float64     // the last measure's experts read per layer per tg step
	for _, pp := range npp {
		for _, tg := range ntg {
			for _, pl := range npl {
				if pl == 0 || pp+tg == 0 {
					continue
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				measure := func() (tPP, tTG, cTG time.Duration, err error) {
					expTG = 0
					loop, err := runner.NewLoop(sess, pl)
					if err != nil {
						return 0, 0, 0, err
					}
					loop.Reset()
					prompts := make([][]int32, pl)
					for s := range prompts {
						for range pp {
							prompts[s] = append(prompts[s], rng.Int32N(int32(m.Hparams().Vocab)))
						}
					}
					t0 := time.Now()
					if err := loop.Prompts(prompts); err != nil {
						return 0, 0, 0, err
					}
					tPP = time.Since(t0)
					t1, c1 := time.Now(), cputime.Process()
					l0, r0 := lctx.ExpertsRead()
					for range tg {
						if _, err := loop.Step(random); err != nil {
							return 0, 0, 0, err
						}
					}
					if l, r := lctx.ExpertsRead(); l > l0 {
						expTG = float64(r-r0) / float64(l-l0)
					}
					return tPP, time.Since(t1), cputime.Process() - c1, nil
				}
				if warm { // the first run pages the weights in and sizes the buffers
					warm = false
					if _, _, _, err := measure(); err != nil {
						return err
					}
				}
				tPP, tTG, cTG, err := measure()
				if err != nil {
					return err
				}
				r := newBatchedRow(pp, tg, pl, tPP, tTG, cTG, threads(lctx.Options().Threads))
				r.ExpertsTG = expTG
				if asJSON {
					line, _ := json.Marshal(r)
					fmt.Fprintln(stdout, string(line))
				} else {
					fmt.Fprintf(stdout, "|%6d |%6d |%4d |%6d |%8.3f |%8.2f |%8.3f |%8.2f |%8.3f |%8.2f |\n",
						r.PP, r.TG, r.PL, r.NKV, r.TPP, r.SpeedPP, r.TTG, r.SpeedTG, r.T, r.Speed)
					rows = append(rows, r)
				}
			}
		}
	}
	if !asJSON {
		printBatchedSummary(stdout, m, rows)
	} else {
		fmt.Fprintf(stderr, "peak RSS: %.1f MiB\n", float64(peakRSS())/(1<<20))
	}
	return nil
}

// newBatchedRow is the row of one (pp, tg, pl) run: the prompt and tg phases' wall times and
// the tg phase's process CPU time (0 where unknown) on threads threads.
func newBatchedRow(pp, tg, pl int, tPP, tTG, cTG time.Duration, threads int) batchedRow {
	r := batchedRow{PP: pp, TG: tg, PL: pl, NKV: pl * (pp + tg), TPP: tPP.Seconds(), TTG: tTG.Seconds()}
	if pp > 0 {
		r.SpeedPP = float64(pl*pp) / r.TPP
	}
	if tg > 0 {
		r.SpeedTG = float64(pl*tg) / r.TTG
		if cTG > 0 {
			r.CPUTG = cTG.Seconds()
			r.SpeedTGCPU = float64(pl*tg) / (r.CPUTG / float64(threads))
		}
	}
	r.T = r.TPP + r.TTG
	r.Speed = float64(r.NKV) / r.T
	return r
}

// printBatchedSummary prints what follows the md table: the tg steps' rates per CPU-second of
// the rows, the experts their steps read (mixture-of-experts models), memory and kernels.
func printBatchedSummary(w io.Writer, m *model.Model, rows []batchedRow) {
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.SpeedTGCPU > 0 {
			fmt.Fprintf(w, "B=%d: S_TG %.2f t/s by process CPU time (%.3f s user+sys over the tg steps, per thread)\n", r.PL, r.SpeedTGCPU, r.CPUTG)
		}
	}
	if h := m.Hparams(); h.NExperts > 0 {
		for _, r := range rows {
			if r.ExpertsTG > 0 {
				fmt.Fprintf(w, "B=%d: a tg step read %.1f of the %d experts per layer (%d used per token)\n", r.PL, r.ExpertsTG, h.NExperts, h.NExpertsUsed)
			}
		}
	}
	fmt.Fprintf(w, "\npeak RSS: %.1f MiB (model file %.1f MiB)\n%s\n", float64(peakRSS())/(1<<20), float64(m.Size)/(1<<20), modelKernels(m))
}
