package all_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"ubatch/batch"
	"ubatch/gguf"
	"ubatch/model"
	"ubatch/quant"
	"ubatch/runner"
)

// A mutation is mutationSize bytes of fuzz input: an operation, a target (a metadata key or
// tensor index, modulo their count) and a 32-bit little-endian argument.
const mutationSize = 6

// Mutation operations; the operation byte is taken modulo opCount.
const (
	opDropKey    = iota // remove the key
	opUint32            // the argument as a uint32
	opInt32             // the argument as an int32 (negative numbers)
	opFloat             // the argument / 8 as a float32
	opFloatBits         // the argument's bits as a float32: NaN, infinities, subnormals
	opString            // the argument in decimal, as a string
	opBool              // the argument's low bit
	opHuge              // the argument << 32, as a uint64
	opArray             // [argument] as an []int32
	opNudge             // an integer key's value plus the argument's low byte as an int8
	opAddKey            // a key some family reads (optionalKeys), with the argument as its value
	opDropTensor        // remove the tensor
	opResize            // change one dimension (see resize)
	opRetype            // another type (F32, F16, Q8_0, Q4_0), data resized
	opRename            // move the tensor to another block (blk.N.) or a name it does not have
	opAddDim            // make the tensor one dimension more (size 1 or 2)
	opCount
)

// optionalKeys are keys (without "ARCH.") the families read when present, which a fixture may
// lack: opAddKey adds one, so that the fuzzer reaches the rope scalings, windows and soft-caps of
// every family.
var optionalKeys = []string{
	"rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
	"rope.scaling.attn_factor", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
	"attention.key_length", "attention.value_length", "attention.sliding_window",
	"attention.sliding_window_pattern", "rope.freq_base_swa", "attn_logit_softcapping",
	"final_logit_softcapping", "rope.dimension_count", "context_length",
	"full_attention_interval", "nextn_predict_layers", // qwen35's
}

// mutation builds one mutation's bytes.
func mutation(op, target byte, arg int32) []byte {
	return binary.LittleEndian.AppendUint32([]byte{op, target}, uint32(arg))
}

// FuzzLoad builds inconsistent-but-parseable variants of every family's mini synth model — a
// metadata value of another type, out of range or dropped, a key added, a tensor dropped,
// resized, retyped, renamed or given another dimension — and checks that model.Load either fails
// with an error or gives a model that decodes a few tokens (as a prompt and as a decode step, two
// sequences) without panicking; with finite logits unless a tensor was retyped (its bytes then
// read as another type's, which may be NaN bit patterns: garbage weights, not an inconsistency).
// Resized tensors keep a prefix of their data and are zero-filled beyond. Each input is a family byte (high bit: do not pack the weights)
// and up to four mutations of mutationSize bytes.
func FuzzLoad(f *testing.F) {
	fxs := fixtures(f)
	for i, fx := range fxs {
		for _, seed := range loadSeeds(fx) {
			f.Add(byte(i), seed)
			f.Add(byte(i)|0x80, seed)
		}
	}
	f.Fuzz(func(t *testing.T, family byte, muts []byte) {
		fx := fxs[int(family&0x7f)%len(fxs)]
		loadMutated(t, fx.file, fx.arch.GGUF, muts, family&0x80 != 0)
	})
}

// targets names a fuzz seed's target bytes in base: key(k) is the index of metadata key prefix+k,
// ten(name) that of tensor name. A name base lacks, or past the byte a mutation can name, fails
// the seed list at once.
func targets(tb testing.TB, base *gguf.File, prefix string) (key, ten func(string) byte) {
	index := func(what, name string, i int) byte {
		if i < 0 || i > 255 {
			tb.Fatalf("the fixture has no %s %s within a target byte", what, name)
		}
		return byte(i)
	}
	key = func(k string) byte {
		return index("key", prefix+k, slices.IndexFunc(base.Metadata, func(kv gguf.KV) bool { return kv.Key == prefix+k }))
	}
	ten = func(name string) byte {
		return index("tensor", name, slices.IndexFunc(base.Tensors, func(t gguf.TensorInfo) bool { return t.Name == name }))
	}
	return key, ten
}

// loadMutated applies up to four mutations of muts to a variant of base (a file of arch), then
// checks that model.Load (packing the weights unless noPack) fails with an error or gives a
// model that decodes a few tokens: with finite logits unless a tensor was retyped.
func loadMutated(t *testing.T, base *gguf.File, arch string, muts []byte, noPack bool) {
	t.Helper()
	v := newVariant(base)
	retyped := false
	for n := 0; n < 4 && len(muts) >= mutationSize; n++ {
		mutate(v, arch, muts[0], muts[1], int32(binary.LittleEndian.Uint32(muts[2:])))
		retyped = retyped || muts[0]%opCount == opRetype
		muts = muts[mutationSize:]
	}
	img, err := v.encode()
	if err != nil {
		return // gguf's writer refuses it: not a parseable file
	}
	file, err := gguf.Parse(img)
	if err != nil {
		return
	}
	m, err := model.Load(file, model.LoadOptions{NoPack: noPack})
	if err != nil {
		if err.Error() == "" {
			t.Fatal("empty error")
		}
		return
	}
	defer m.Close()
	decodeFew(t, m, !retyped)
}

// decodeFew decodes a 5-token prompt of sequence 0 with a 2-token one of sequence 1, then one
// token of each. Decode may refuse (e.g. a context the model cannot be sized for); it must not
// panic, and when finite is set every logit must be finite.
func decodeFew(t *testing.T, m *model.Model, finite bool) {
	rt, err := runner.New(m.Graph, runner.Options{NCtx: 32, NSeqMax: 2, NUBatch: 4, Threads: 1})
	if err != nil {
		return
	}
	defer rt.Close()
	c, err := runner.NewSession(rt)
	if err != nil {
		t.Fatal(err) // New checked the KV configuration
	}
	vocab := int32(m.Hparams().Vocab)
	var b batch.Batch
	for p := range 5 {
		b.Add(int32(p+1)%vocab, int32(p), []int32{0}, true)
	}
	b.Add(2%vocab, 0, []int32{1}, true)
	b.Add(3%vocab, 1, []int32{1}, true)
	check := func() {
		for i := range b.Len() {
			row := c.Logits(i)
			if len(row) != int(vocab) {
				t.Fatalf("token %d: %d logits, want %d", i, len(row), vocab)
			}
			for j, x := range row {
				if finite && (math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)) {
					t.Fatalf("token %d: logit %d is %v: the model loaded but computes garbage", i, j, x)
				}
			}
		}
	}
	if err := c.Decode(&b); err != nil {
		return
	}
	check()
	b.Clear()
	b.Add(4%vocab, 5, []int32{0}, true)
	b.Add(5%vocab, 2, []int32{1}, true)
	if err := c.Decode(&b); err != nil {
		return
	}
	check()
}

// mutate applies one mutation to v (arch is general.architecture, the prefix of its keys).
func mutate(v *variant, arch string, op, target byte, arg int32) {
	op %= opCount
	if op >= opDropTensor {
		if len(v.Tensors) > 0 {
			mutateTensor(v, &v.Tensors[int(target)%len(v.Tensors)], op, arg)
		}
		return
	}
	if op == opAddKey {
		key := arch + "." + optionalKeys[int(target)%len(optionalKeys)]
		switch {
		case strings.HasSuffix(key, ".type"):
			v.set(key, []string{"none", "linear", "yarn", "longrope", ""}[uint32(arg)%5])
		case arg&1 == 1:
			v.set(key, float32(arg>>1)/16)
		default:
			v.set(key, uint32(arg>>1)&0xffff)
		}
		return
	}
	if len(v.Meta) == 0 {
		return
	}
	kv := &v.Meta[int(target)%len(v.Meta)]
	switch op {
	case opDropKey:
		v.set(kv.Key, nil)
	case opUint32:
		kv.Value = uint32(arg)
	case opInt32:
		kv.Value = arg
	case opFloat:
		kv.Value = float32(arg) / 8
	case opFloatBits:
		kv.Value = math.Float32frombits(uint32(arg))
	case opString:
		kv.Value = fmt.Sprint(arg)
	case opBool:
		kv.Value = arg&1 == 1
	case opHuge:
		kv.Value = uint64(uint32(arg)) << 32
	case opArray:
		kv.Value = []int32{arg}
	case opNudge:
		if i, ok := asInt(kv.Value); ok {
			if n := i + int64(int8(arg)); n >= 0 {
				kv.Value = uint32(n)
			} else {
				kv.Value = int32(n)
			}
		}
	}
}

// mutateTensor applies a tensor operation to t (opDropTensor removes it from v).
func mutateTensor(v *variant, t *tensorEdit, op byte, arg int32) {
	switch op {
	case opDropTensor:
		v.dropTensor(t.Name)
	case opResize:
		t.Dims[int(uint32(arg)>>8)%len(t.Dims)] = resize(t.Dims[int(uint32(arg)>>8)%len(t.Dims)], byte(arg))
	case opRetype:
		t.Type = []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0}[uint32(arg)%4]
	case opRename:
		t.Name = rename(v, t.Name, uint32(arg))
	case opAddDim:
		if len(t.Dims) < 4 {
			t.Dims = append(t.Dims, uint64(1+arg&1))
		}
	}
}

// resize changes a dimension by one block (32) up or down, doubles or halves it, or sets it to 0
// or 1, mostly keeping it a whole number of blocks so that the writer accepts it.
func resize(d uint64, how byte) uint64 {
	switch how % 6 {
	case 0:
		return d + 32
	case 1:
		if d > 32 {
			return d - 32
		}
		return 0
	case 2:
		return 2 * d
	case 3:
		return d / 2
	case 4:
		return 0
	}
	return 1
}

// rename moves "blk.N.rest" to block arg%4 (or another name when that one exists), and any
// other tensor to a tensor name the families read that it does not have.
func rename(v *variant, name string, arg uint32) string {
	candidates := []string{"output.weight", "rope_freqs.weight", "rope_factors_short.weight", "blk.0.attn_q.bias", "token_embd.weight"}
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		_, suffix, _ := strings.Cut(rest, ".")
		candidates = []string{fmt.Sprintf("blk.%d.%s", arg%4, suffix), "blk.0.attn_qkv.weight", "blk.0.attn_q_norm.weight"}
	}
	for i := range candidates {
		c := candidates[(int(arg)+i)%len(candidates)]
		if v.tensor(c) == nil {
			return c
		}
	}
	return name + ".moved"
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		return int64(min(x, math.MaxInt64)), true
	}
	return 0, false
}

// loadSeeds are the meaningful starting points for one fixture: each operation on the keys
// and tensors that decide the sizes (the bad-input table's cases, and near-valid values).
func loadSeeds(fx fixture) [][]byte {
	key := func(k string) byte {
		return byte(slices.IndexFunc(fx.file.Metadata, func(kv gguf.KV) bool { return kv.Key == k }))
	}
	ten := func(name string) byte {
		return byte(slices.IndexFunc(fx.file.Tensors, func(t gguf.TensorInfo) bool { return t.Name == name }))
	}
	a := fx.arch.GGUF + "."
	seeds := [][]byte{
		nil, // the valid file
		mutation(opUint32, key(a+"attention.head_count_kv"), 0),
		mutation(opUint32, key(a+"attention.head_count_kv"), 3),
		mutation(opNudge, key(a+"attention.head_count"), 4),
		mutation(opNudge, key(a+"block_count"), -1),
		mutation(opNudge, key(a+"block_count"), 1),
		mutation(opString, key(a+"context_length"), 4096),
		mutation(opInt32, key(a+"context_length"), -5),
		mutation(opFloatBits, key(a+"rope.freq_base"), 0x7fc00000), // NaN
		mutation(opString, key(a+"rope.freq_base"), 1),             // gemma divided by the zero pattern after this error
		mutation(opFloatBits, key(a+"attention.layer_norm_rms_epsilon"), 0x7f800000),
		mutation(opHuge, key(a+"embedding_length"), 1),
		mutation(opDropKey, key(a+"feed_forward_length"), 0),
		mutation(opString, key("general.architecture"), 9),
		mutation(opUint32, key("tokenizer.ggml.eos_token_id"), 999999),
		mutation(opArray, key("tokenizer.ggml.tokens"), 1),
		append(mutation(opAddKey, 6, 2*64), mutation(opAddKey, 7, 2*64)...), // key and value length 64
		append(mutation(opAddKey, 0, 2), mutation(opAddKey, 1, 8<<1|1)...),  // YaRN, factor 0.5
		mutation(opAddKey, 9, 0),                                            // sliding_window_pattern 0
		mutation(opAddKey, 13, 3<<1),                                        // rope.dimension_count 3
		mutation(opDropTensor, ten("blk.1.ffn_down.weight"), 0),
		mutation(opResize, ten("blk.0.attn_output.weight"), 1<<8),
		mutation(opResize, ten("token_embd.weight"), 1<<8|3),
		mutation(opResize, ten("blk.1.attn_norm.weight"), 5),
		mutation(opRetype, ten("blk.0.ffn_up.weight"), 1),
		mutation(opRename, ten("blk.1.attn_norm.weight"), 3),
		mutation(opAddDim, ten("output_norm.weight"), 1),
	}
	if _, moe := fx.file.Value(a + "expert_count"); moe {
		seeds = append(seeds,
			mutation(opUint32, key(a+"expert_count"), 0),
			mutation(opNudge, key(a+"expert_count"), 1),
			mutation(opDropKey, key(a+"expert_count"), 0),
			mutation(opNudge, key(a+"expert_used_count"), 8),
			mutation(opUint32, key(a+"expert_used_count"), 0),
			mutation(opNudge, key(a+"expert_feed_forward_length"), 32),
			mutation(opResize, ten("blk.0.ffn_gate_exps.weight"), 2<<8|1), // one expert fewer... or none
			mutation(opResize, ten("blk.1.ffn_down_exps.weight"), 0<<8|0),
			mutation(opResize, ten("blk.0.ffn_up_exps.weight"), 1<<8|2),
			mutation(opDropTensor, ten("blk.1.ffn_up_exps.weight"), 0),
			mutation(opDropTensor, ten("blk.0.ffn_gate_inp.weight"), 0),
			mutation(opRetype, ten("blk.0.ffn_gate_inp.weight"), 2), // a quantized router still computes
			mutation(opRetype, ten("blk.1.ffn_down_exps.weight"), 1),
			mutation(opAddDim, ten("blk.0.ffn_gate_inp.weight"), 1),
			mutation(opAddDim, ten("blk.1.ffn_gate_exps.weight"), 0),
		)
	}
	return seeds
}
