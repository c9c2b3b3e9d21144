package runner

import (
	"encoding/binary"
	"fmt"
	"math"

	"ubatch/batch"
)

// Recurrent sizes a hybrid family's recurrent layers (gated delta nets: Qwen 3.5, Qwen3-Next),
// whose memory is a fixed-size state per sequence instead of KV cells.
type Recurrent struct {
	Layers     int // recurrent layers; the family numbers them [0, Layers) in layer order
	ConvKernel int // taps of the short causal convolution (ssm.conv_kernel)
	KHeads     int // key (and query) heads (ssm.group_count)
	VHeads     int // value heads (ssm.time_step_rank), a multiple of KHeads
	HeadK      int // width of a key head (ssm.state_size)
	HeadV      int // width of a value head (ssm.inner_size / VHeads)
}

// ConvChannels is the width of the convolved in-projection: queries, keys, then values.
func (r *Recurrent) ConvChannels() int { return 2*r.KHeads*r.HeadK + r.VHeads*r.HeadV }

// ValueDim is the width of all value heads together (ssm.inner_size).
func (r *Recurrent) ValueDim() int { return r.VHeads * r.HeadV }

// convLen and deltaLen are one layer's state sizes in float32s.
func (r *Recurrent) convLen() int  { return (r.ConvKernel - 1) * r.ConvChannels() }
func (r *Recurrent) deltaLen() int { return r.VHeads * r.HeadV * r.HeadK }

// seqLen is one sequence's whole state in float32s.
func (r *Recurrent) seqLen() int { return r.Layers * (r.convLen() + r.deltaLen()) }

// StateBytesPerSeq is one sequence's recurrent state in bytes (the memory plan's unit).
func (r *Recurrent) StateBytesPerSeq() int64 { return 4 * int64(r.seqLen()) }

// recState holds the recurrent state of every sequence id, and the delta-net layers' scratch.
// Sequence s's state is data[s·seqLen : (s+1)·seqLen]: per recurrent layer l in order, the conv
// state ([ConvKernel-1][ConvChannels], oldest input first) then the delta state ([VHeads][HeadV]
// [HeadK]: per value head, row j holds the weights that read value element j from a key).
type recState struct {
	r    Recurrent
	data []float32
	// snaps holds the snapshot slots (snapshot.go), each laid out as one sequence's state.
	snaps []float32
	// Scratch of one micro-batch: in-projection [n][ConvChannels], its convolution, the output
	// gate z [n][ValueDim], beta and alpha [n][VHeads], the heads' output [n][ValueDim], and the
	// gated attention's joint query+gate projection [n][2·QDim].
	qkv, conv, z, beta, alpha, out, qg []float32
	task                               deltaTask
}

func newRecState(r *Recurrent, nSeq, nUBatch, qdim int) *recState {
	f := func(w int) []float32 { return make([]float32, nUBatch*w) }
	return &recState{
		r: *r, data: make([]float32, nSeq*r.seqLen()),
		qkv: f(r.ConvChannels()), conv: f(r.ConvChannels()), z: f(r.ValueDim()),
		beta: f(r.VHeads), alpha: f(r.VHeads), out: f(r.ValueDim()), qg: f(2 * qdim),
	}
}

// layer returns sequence seq's conv and delta states of recurrent layer l.
func (s *recState) layer(seq, l int) (conv, delta []float32) {
	cl, dl := s.r.convLen(), s.r.deltaLen()
	off := seq*s.r.seqLen() + l*(cl+dl)
	return s.data[off : off+cl], s.data[off+cl : off+cl+dl]
}

func (s *recState) seq(seq int) []float32 {
	n := s.r.seqLen()
	return s.data[seq*n : (seq+1)*n]
}

// checkRecurrent is decode's precondition for a hybrid model: each token belongs to exactly one
// sequence (a shared prompt cannot update several states at once).
func (c *Runtime) checkRecurrent(b *batch.Batch) error {
	if c.rec == nil {
		return nil
	}
	for i, seqs := range b.Seqs {
		if len(seqs) != 1 {
			return fmt.Errorf("runner: token %d belongs to %d sequences; a hybrid recurrent model needs exactly one per token (decode a shared prompt once, then copy the sequence with StateCopy)", i, len(seqs))
		}
	}
	return nil
}

// Recurrent reports whether the model keeps a recurrent state per sequence (a hybrid family).
func (c *Runtime) Recurrent() bool { return c.rec != nil }

// StateBytes is the size of one sequence's whole recurrent state (StateSave's layout), 0 for a
// model without recurrent layers.
func (c *Runtime) StateBytes() int {
	if c.rec == nil {
		return 0
	}
	return 4 * c.rec.r.seqLen()
}

func (c *Runtime) checkSeq(seq int) {
	if seq < 0 || seq >= c.opts.NSeqMax {
		panic(fmt.Sprintf("runner: recurrent state of sequence %d outside [0, %d)", seq, c.opts.NSeqMax))
	}
}

// StateClear zeroes sequence seq's recurrent state (a fresh sequence). seq is in [0, NSeqMax).
func (c *Runtime) StateClear(seq int) {
	if c.rec == nil {
		return
	}
	c.checkSeq(seq)
	clear(c.rec.seq(seq))
}

// StateCopy copies sequence src's recurrent state over dst's (seq_cp). Both are in
// [0, NSeqMax).
func (c *Runtime) StateCopy(dst, src int) {
	if c.rec == nil {
		return
	}
	c.checkSeq(dst)
	c.checkSeq(src)
	copy(c.rec.seq(dst), c.rec.seq(src))
}

// StateSave writes sequence seq's recurrent state into dst[:StateBytes()]: float32 little-endian,
// per recurrent layer in order the conv state [ConvKernel-1][ConvChannels] then the delta state
// [VHeads][HeadV][HeadK]. len(dst) >= StateBytes(); it allocates nothing.
func (c *Runtime) StateSave(seq int, dst []byte) {
	if c.rec == nil {
		return
	}
	c.checkSeq(seq)
	putFloats(dst, c.rec.seq(seq))
}

// putFloats writes src into dst as float32 little-endian; len(dst) >= 4·len(src).
func putFloats(dst []byte, src []float32) {
	if len(dst) < 4*len(src) {
		panic(fmt.Sprintf("runner: a recurrent state into %d bytes, the state has %d", len(dst), 4*len(src)))
	}
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// StateLoad replaces sequence seq's recurrent state by src, StateSave's bytes. src of another
// size, or holding a value that is not finite, is an error and changes nothing.
func (c *Runtime) StateLoad(seq int, src []byte) error {
	if c.rec == nil {
		if len(src) != 0 {
			return fmt.Errorf("runner: a recurrent state of %d bytes for a model without recurrent layers", len(src))
		}
		return nil
	}
	if seq < 0 || seq >= c.opts.NSeqMax {
		return fmt.Errorf("runner: recurrent state of sequence %d outside [0, %d)", seq, c.opts.NSeqMax)
	}
	return getFloats(c.rec.seq(seq), src)
}

// getFloats replaces dst by src's float32 little-endian values, all finite and exactly
// len(dst) of them, or changes nothing and says why.
func getFloats(dst []float32, src []byte) error {
	if len(src) != 4*len(dst) {
		return fmt.Errorf("runner: a recurrent state of %d bytes, this model's has %d (saved from another model?)", len(src), 4*len(dst))
	}
	for i := range dst {
		if f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])); math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("runner: the recurrent state holds a non-finite value at element %d", i)
		}
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return nil
}
