package all_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"ubatch/engine"
	"ubatch/internal/testmodel"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/runner"
	"ubatch/sample"
)

// hybridEngine makes an engine over the hybrid model m with nCtx KV cells and nSeq sequence
// ids, running until the test ends.
func hybridEngine(t *testing.T, m *model.Model, nCtx, nSeq int, cfg engine.Config) *engine.Engine {
	t.Helper()
	c := testmodel.Runtime(t, m, runner.Options{NCtx: nCtx, NSeqMax: nSeq, NBatch: 256, NUBatch: 64, Threads: 2})
	o := c.Options()
	eng, err := engine.New(c, engine.Limits{NCtx: o.NCtx, NSeqMax: o.NSeqMax, NBatch: o.NBatch, Vocab: m.Hparams().Vocab}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !eng.Recurrent() {
		t.Fatal("the engine does not see the hybrid model's recurrent state")
	}
	testmodel.Run(t, eng)
	return eng
}

// collect reads every stream to its end: the tokens of each choice, in stream order.
func collect(t *testing.T, streams []*engine.Stream, choices int) [][]int32 {
	t.Helper()
	var outs [][]int32
	for i, st := range streams {
		got := make([][]int32, choices)
		for {
			o, err := st.Recv(context.Background())
			if err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if o.Done && o.Finish == engine.FinishError {
				t.Fatalf("stream %d choice %d: %v", i, o.Seq, o.Err)
			}
			if !o.Done {
				got[o.Seq] = append(got[o.Seq], o.Token)
			}
		}
		outs = append(outs, got...)
	}
	return outs
}

// TestHybridEngineEqualsAlone schedules the hybrid qwen35 through the engine: many sequences at
// once, each with its own recurrent state, in steps that mix prompt chunks and decode tokens;
// under a KV pool too small for all (preemption by recompute: the state cleared and the
// sequence prefilled again); several choices of one prompt. Every greedy text must equal the
// same prompt's decoded alone.
func TestHybridEngineEqualsAlone(t *testing.T) {
	m := load(t, hybridModel, false)
	greedy := sample.DefaultParams()
	greedy.Temperature = 0
	var distinct, shared [][]int32
	for i := range 8 {
		p := []int32{1}
		for j := range 9 + 5*i { // 10 to 45 tokens: chunks of 16 end at different places
			p = append(p, int32(20+(37*i+11*j)%480))
		}
		distinct = append(distinct, p)
		shared = append(shared, append(slices.Clone(hybridHist[0]), int32(100+10*i), int32(101+10*i)))
	}
	tests := []struct {
		name      string
		prompts   [][]int32
		nCtx      int
		choices   int
		maxTokens int
		preempt   bool // the KV pool cannot hold them all: preemptions must happen
	}{
		{name: "8 concurrent", prompts: distinct, nCtx: 1024, choices: 1, maxTokens: 24},
		{name: "shared prefix", prompts: shared, nCtx: 1024, choices: 1, maxTokens: 24},
		{name: "tight KV preempts", prompts: shared, nCtx: 128, choices: 1, maxTokens: 24, preempt: true},
		{name: "3 choices each", prompts: distinct[:3], nCtx: 1024, choices: 3, maxTokens: 16},
	}
	alone := map[string][]int32{} // by prompt, fmt.Sprint'ed
	aloneOf := func(p []int32, maxTokens int) []int32 {
		key := fmt.Sprint(p)
		if out, ok := alone[key]; ok {
			return out[:min(len(out), maxTokens)]
		}
		eng := hybridEngine(t, m, 256, 1, engine.Config{BatchSize: 64, ChunkSize: 16})
		st, err := eng.Submit(context.Background(), engine.Request{Prompt: p, MaxTokens: 24, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		alone[key] = collect(t, []*engine.Stream{st}, 1)[0]
		return alone[key][:min(len(alone[key]), maxTokens)]
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := hybridEngine(t, m, tc.nCtx, 8, engine.Config{BatchSize: 64, ChunkSize: 16})
			// Short requests first teach the admission watermark that completions are short, so
			// that it admits more growth than a tight pool holds: preemption then follows.
			warm := []*engine.Stream{}
			for i := range 4 {
				st, err := eng.Submit(context.Background(), engine.Request{Prompt: []int32{1, int32(2 + i)}, MaxTokens: 1, Sampling: greedy})
				if err != nil {
					t.Fatal(err)
				}
				warm = append(warm, st)
			}
			collect(t, warm, 1)
			var streams []*engine.Stream
			for _, p := range tc.prompts {
				reqs := make([]engine.Request, tc.choices)
				for i := range reqs {
					reqs[i] = engine.Request{Prompt: p, MaxTokens: tc.maxTokens, Sampling: greedy}
				}
				st, err := eng.Submit(context.Background(), reqs...)
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, st)
			}
			got := collect(t, streams, tc.choices)
			for i, out := range got {
				pi := i / tc.choices
				if want := aloneOf(tc.prompts[pi], tc.maxTokens); !slices.Equal(out, want) {
					t.Errorf("prompt %d choice %d: batched %v, alone %v", pi, i%tc.choices, out, want)
				}
			}
			st := eng.Stats()
			if tc.preempt && st.Preemptions == 0 {
				t.Errorf("no preemption under a KV pool of %d cells: %+v", tc.nCtx, st)
			}
			t.Logf("steps %d, preemptions %d, prompt tokens computed %d, cached %d", st.Steps, st.Preemptions, st.PromptComputed, st.PromptCached)
		})
	}
}

// TestHybridEngineRefusals: what the hybrid's recurrent state rules out until the tiers carry
// it is refused with the reason, not served wrong: a context shift at New, a disk tier or peer
// source at SetTiers (slot files alone are accepted: they carry the state), a peer's export.
func TestHybridEngineRefusals(t *testing.T) {
	m := load(t, hybridModel, false)
	c := testmodel.Runtime(t, m, runner.Options{NCtx: 128, NSeqMax: 2, Threads: 1})
	o := c.Options()
	lim := engine.Limits{NCtx: o.NCtx, NSeqMax: o.NSeqMax, NBatch: o.NBatch, Vocab: m.Hparams().Vocab}
	if _, err := engine.New(c, lim, engine.Config{ContextShift: true}); !errors.Is(err, engine.ErrRecurrentShift) {
		t.Errorf("New with ContextShift: %v, want %v", err, engine.ErrRecurrentShift)
	}
	eng, err := engine.New(c, lim, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := kvfile.Layout{BlockSize: c.KVConfig().BlockSize, StateBytes: c.StateBytes()} // SetTiers reads no file
	if eng.SetTiers([]engine.BlockSource{nil}, nil, l) {
		t.Error("SetTiers accepted a block source for a hybrid model")
	}
	if !eng.SetTiers(nil, nil, l) {
		t.Error("SetTiers refused slot files alone for a hybrid model")
	}
	testmodel.Run(t, eng)
	if _, err := eng.ExportBlocks(context.Background(), kvcache.Salt{}, []int32{1, 2}, 4); !errors.Is(err, engine.ErrRecurrentTiers) {
		t.Errorf("export: %v, want %v", err, engine.ErrRecurrentTiers)
	}
}
