package all_test

import (
	"slices"
	"strings"
	"testing"

	"ubatch/batch"
	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	"ubatch/runner"
)

const hybridModel = "arch/synth-qwen35-f16.gguf"

// hybridHist is each sequence's token history for the hybrid tests.
var hybridHist = [][]int32{
	{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 310, 320, 330, 340, 350, 360, 370, 380, 390},
	{1, 300, 301, 302, 303, 304, 305, 306},
	{1, 410, 411, 412, 413, 414, 415},
}

// decodeRows decodes b on c and stores each token's logits in got[seq][pos].
func decodeRows(t *testing.T, c *runner.Session, b *batch.Batch, got [][][]float32) {
	t.Helper()
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	for i := range b.Len() {
		got[b.Seqs[i][0]][b.Pos[i]] = slices.Clone(c.Logits(i))
	}
}

// TestHybridInterleavedEqualsAlone decodes three sequences of the hybrid model together, their
// prompt chunks interleaved token by token within micro-batches and mixed with decode tokens of
// another: each sequence's recurrent state must see only its own tokens, in position order.
func TestHybridInterleavedEqualsAlone(t *testing.T) {
	c := open(t, hybridModel, runner.Options{NCtx: 128, NSeqMax: 3, NUBatch: 8, Threads: 2})
	got := make([][][]float32, len(hybridHist))
	for s := range got {
		got[s] = make([][]float32, len(hybridHist[s]))
	}
	var b batch.Batch
	// 1: seqs 1 and 2 prefill 5 tokens each, interleaved (two micro-batches of 8, then 2).
	for p := range 5 {
		for s := 1; s <= 2; s++ {
			b.Add(hybridHist[s][p], int32(p), []int32{int32(s)}, true)
		}
	}
	decodeRows(t, c, &b, got)
	// 2: seq 0's whole prompt split over micro-batches, with decode tokens of 1 and 2 between.
	b.Clear()
	for p := range hybridHist[0] {
		b.Add(hybridHist[0][p], int32(p), []int32{0}, true)
		if p == 3 || p == 11 {
			s := 1 + p/11
			b.Add(hybridHist[s][5], 5, []int32{int32(s)}, true)
		}
	}
	decodeRows(t, c, &b, got)
	// 3: the rest, one decode step each.
	for p := 6; p < len(hybridHist[1]); p++ {
		b.Clear()
		b.Add(hybridHist[1][p], int32(p), []int32{1}, true)
		if p < len(hybridHist[2]) {
			b.Add(hybridHist[2][p], int32(p), []int32{2}, true)
		}
		decodeRows(t, c, &b, got)
	}
	for s, h := range hybridHist {
		want := aloneLogits(t, hybridModel, 0, false, h)
		for p := range h {
			if got[s][p] == nil {
				t.Fatalf("seq %d pos %d was never decoded", s, p)
			}
			if e := testdata.RelRMS(got[s][p], want[p]); e > 1e-5 {
				t.Errorf("seq %d pos %d: interleaved vs alone relative RMS %.2e > 1e-5", s, p, e)
			}
		}
	}
}

// continueLogits decodes toks for seq 0 of loop-less c from position pos, one batch, and returns
// their logits.
func continueLogits(t *testing.T, c *runner.Session, seq int, pos int32, toks []int32) [][]float32 {
	t.Helper()
	var b batch.Batch
	for i, tok := range toks {
		b.Add(tok, pos+int32(i), []int32{int32(seq)}, true)
	}
	if err := c.Decode(&b); err != nil {
		t.Fatal(err)
	}
	var rows [][]float32
	for i := range toks {
		rows = append(rows, slices.Clone(c.Logits(i)))
	}
	return rows
}

// worstRel is the worst relative RMS difference between two lists of logit rows.
func worstRel(a, b [][]float32) float64 {
	w := 0.0
	for i := range b {
		w = max(w, testdata.RelRMS(a[i], b[i]))
	}
	return w
}

// TestHybridStateOps checks the runner's recurrent-state operations on the hybrid model: a
// state saved, cleared and loaded back continues as the uninterrupted run; a cleared state with
// the sequence's KV freed, fed the prompt again, equals a fresh context; a copied state (with
// its KV) continues as the original; and a cleared state without reloading is far off (the
// state matters).
func TestHybridStateOps(t *testing.T) {
	h := hybridHist[0]
	head, tail := h[:12], h[12:]
	want := aloneLogits(t, hybridModel, 0, false, h)[12:]
	opts := runner.Options{NCtx: 128, NSeqMax: 2, Threads: 2}

	c := open(t, hybridModel, opts)
	if c.Runtime().StateBytes() == 0 {
		t.Fatal("StateBytes is 0 for a hybrid model")
	}
	promptLogits(t, c, head)
	saved := make([]byte, c.Runtime().StateBytes())
	c.Runtime().StateSave(0, saved)

	t.Run("copy", func(t *testing.T) {
		if err := c.KV().SeqCopy(0, 1, 0, -1); err != nil {
			t.Fatal(err)
		}
		c.Runtime().StateCopy(1, 0)
		if e := worstRel(continueLogits(t, c, 1, 12, tail), want); e > 1e-5 {
			t.Errorf("copied state: relative RMS %.2e from the uninterrupted run", e)
		}
		c.KV().SeqFree(1)
		c.Runtime().StateClear(1)
	})
	t.Run("cleared", func(t *testing.T) {
		c.Runtime().StateClear(0)
		e := worstRel(continueLogits(t, c, 0, 12, tail), want)
		if e < 0.05 {
			t.Errorf("a cleared state continues within %.2e of the real one: the state is not used", e)
		}
		t.Logf("a cleared state continues %.1f%% off", 100*e)
		c.KV().SeqRemove(0, 12, -1)
	})
	t.Run("save-load", func(t *testing.T) {
		if err := c.Runtime().StateLoad(0, saved); err != nil {
			t.Fatal(err)
		}
		if e := worstRel(continueLogits(t, c, 0, 12, tail), want); e > 1e-5 {
			t.Errorf("saved and loaded state: relative RMS %.2e from the uninterrupted run", e)
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		rt := c.Runtime()
		if err := rt.ReserveSnapshots(-1); err == nil {
			t.Error("ReserveSnapshots(-1) accepted")
		}
		if err := rt.ReserveSnapshots(2); err != nil || rt.Snapshots() != 2 {
			t.Fatalf("ReserveSnapshots(2): %v, %d slots", err, rt.Snapshots())
		}
		if err := rt.StateLoad(0, saved); err != nil {
			t.Fatal(err)
		}
		rt.SnapshotSave(1, 0)
		rt.StateClear(0)
		rt.SnapshotLoad(1, 1) // into sequence 1, which continues sequence 0's first 12 tokens
		if err := c.KV().SeqCopy(0, 1, 0, 12); err != nil {
			t.Fatal(err)
		}
		if e := worstRel(continueLogits(t, c, 1, 12, tail), want); e > 1e-5 {
			t.Errorf("state through a snapshot slot: relative RMS %.2e from the uninterrupted run", e)
		}
		c.KV().SeqFree(1)
		rt.StateClear(1)
	})
	t.Run("clear-refeed", func(t *testing.T) {
		c.KV().SeqFree(0)
		c.Runtime().StateClear(0)
		fresh := aloneLogits(t, hybridModel, 0, false, h)
		if e := worstRel(promptLogits(t, c, h), fresh); e > 1e-5 {
			t.Errorf("cleared and fed again: relative RMS %.2e from a fresh context", e)
		}
	})
	t.Run("load-errors", func(t *testing.T) {
		nan := slices.Clone(saved)
		copy(nan[8:], []byte{0, 0, 0xc0, 0x7f}) // a float32 NaN
		for _, tc := range []struct {
			name string
			seq  int
			src  []byte
			want string
		}{
			{"short", 0, saved[:len(saved)-4], "bytes, this model's has"},
			{"seq out of range", 2, saved, "outside [0, 2)"},
			{"nan", 0, nan, "non-finite"},
		} {
			if err := c.Runtime().StateLoad(tc.seq, tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: StateLoad error %v, want one containing %q", tc.name, err, tc.want)
			}
		}
	})
}

// TestHybridSharedTokenRefused: a token of two sequences cannot update two recurrent states; the
// batch is an error, not silently wrong output.
func TestHybridSharedTokenRefused(t *testing.T) {
	c := open(t, hybridModel, runner.Options{NCtx: 64, NSeqMax: 2, Threads: 2})
	var b batch.Batch
	b.Add(1, 0, []int32{0, 1}, true)
	err := c.Decode(&b)
	if err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Fatalf("Decode of a token of two sequences: %v, want an error saying exactly one", err)
	}
	if st := c.KV().Stats(); st.Used != 0 {
		t.Errorf("the refused batch left %d KV blocks used, want none", st.Used)
	}
}

// TestHybridSharedPromptCopied: the tools' loop decodes a prompt shared by several sequences of
// a hybrid model once, for the first, and copies its KV and state to the others; each then goes
// on as if it had been fed the prompt alone.
func TestHybridSharedPromptCopied(t *testing.T) {
	c := open(t, hybridModel, runner.Options{NCtx: 128, NSeqMax: 2, Threads: 2})
	loop, err := runner.NewLoop(c, 2)
	if err != nil {
		t.Fatal(err)
	}
	prompt := hybridHist[2][:5]
	if err := loop.Prompt([]int32{0, 1}, prompt, nil); err != nil {
		t.Fatal(err)
	}
	tails := [][]int32{{414, 415}, {420, 421}}
	got := make([][][]float32, 2)
	for s, tail := range tails {
		got[s] = continueLogits(t, c, s, 5, tail)
	}
	for s, tail := range tails {
		want := aloneLogits(t, hybridModel, 0, false, append(slices.Clone(prompt), tail...))[5:]
		if e := worstRel(got[s], want); e > 1e-5 {
			t.Errorf("seq %d after the shared prompt: relative RMS %.2e from alone", s, e)
		}
	}
}

// TestQwen35MTPLayersIgnored: a file with a multi-token-prediction block past the trunk
// (nextn_predict_layers 1, block_count one more, blk.4 a full-attention block with its nextn
// tensors) loads, and its logits are the trunk's: the MTP block is not run.
func TestQwen35MTPLayersIgnored(t *testing.T) {
	base, err := gguf.Parse(testdata.ReadFile(t, "models/"+hybridModel))
	if err != nil {
		t.Fatal(err)
	}
	v := newVariant(base)
	v.set("qwen35.block_count", uint32(5))
	v.set("qwen35.nextn_predict_layers", uint32(1))
	for _, te := range slices.Clone(v.Tensors) {
		if rest, ok := strings.CutPrefix(te.Name, "blk.3."); ok {
			te.Name, te.Dims = "blk.4."+rest, slices.Clone(te.Dims)
			v.Tensors = append(v.Tensors, te)
			if rest == "ffn_down.weight" { // [2·Dim -> Dim], the shape of eh_proj
				te.Name = "blk.4.nextn.eh_proj.weight"
				v.Tensors = append(v.Tensors, te)
			}
		}
	}
	img, err := v.encode()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(img)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, model.LoadOptions{})
	if err != nil {
		t.Fatalf("a file with an MTP block: %v", err)
	}
	defer m.Close()
	if n := m.Hparams().NLayers; n != 4 {
		t.Errorf("%d layers run, want the trunk's 4", n)
	}
	toks := hybridHist[0][:8]
	got := promptLogits(t, testmodel.Session(t, m, runner.Options{NCtx: 64, Threads: 2}), toks)
	if e := worstRel(got, aloneLogits(t, hybridModel, 0, false, toks)); e > 1e-6 {
		t.Errorf("with the MTP block: relative RMS %.2e from the trunk alone", e)
	}
}
