package runner

import (
	"math"

	"ubatch/ops"
)

// DeltaNet is one gated delta net layer's weights (Qwen 3.5's linear attention), sized by
// Hparams.Recurrent (r): QKV [Dim -> ConvChannels] (queries, keys, values), Z [Dim -> ValueDim]
// (the output gate, attn_gate), Beta and Alpha [Dim -> VHeads], Out [ValueDim -> Dim] (ssm_out).
type DeltaNet struct {
	QKV, Z, Beta, Alpha, Out Weight
	Conv                     []float32 // ssm_conv1d [ConvChannels][ConvKernel], tap 0 the oldest input
	DtBias                   []float32 // ssm_dt.bias [VHeads], added to alpha before the softplus
	A                        []float32 // ssm_a [VHeads]: -exp(A_log), negative, as the converter stores it
	Norm                     []float32 // ssm_norm [HeadV]: the gated RMSNorm's weights, shared by every head
}

// AppendMatrices appends the layer's five matrices to ws (Graph.Matrices).
func (w *DeltaNet) AppendMatrices(ws []*Weight) []*Weight {
	return append(ws, &w.QKV, &w.Z, &w.Beta, &w.Alpha, &w.Out)
}

// DeltaNetLayer computes recurrent layer rl (in [0, Recurrent.Layers)) from S.XN into S.Tmp
// ([n][Dim]), updating each token's sequence's state in token order: the in-projections, the
// causal conv with SiLU, L2-normed queries and keys, the gated delta rule per value head (value
// head h reads key head h mod KHeads, as llama.cpp tiles them), an RMSNorm of each head's output
// times silu(z), and the out-projection. The rule runs on the pool, one value head a piece: the
// heads' states are independent, and each piece takes the micro-batch's tokens in order.
func (c *Runtime) DeltaNetLayer(rl int, w *DeltaNet) {
	rs, r, s := c.rec, &c.rec.r, &c.S
	c.MatMul2(s.XN, &w.QKV, rs.qkv, &w.Z, rs.z)
	c.MatMul2(s.XN, &w.Beta, rs.beta, &w.Alpha, rs.alpha)
	ch := r.ConvChannels()
	for t := range c.n {
		conv, _ := rs.layer(int(c.ub.Seqs[t][0]), rl)
		x := rs.conv[t*ch : (t+1)*ch]
		ops.CausalConvStep(x, conv, rs.qkv[t*ch:(t+1)*ch], w.Conv, ch, r.ConvKernel)
		for h := range 2 * r.KHeads { // the queries' heads, then the keys'
			ops.L2Norm(x[h*r.HeadK:(h+1)*r.HeadK], c.h.Eps)
		}
		// alpha becomes each head's decay exp(softplus(alpha+dt)·A), beta its sigmoid.
		for h := range r.VHeads {
			i := t*r.VHeads + h
			rs.alpha[i] = float32(math.Exp(float64(ops.Softplus(rs.alpha[i]+w.DtBias[h]) * w.A[h])))
			rs.beta[i] = ops.Sigmoid(rs.beta[i])
		}
	}
	rs.task.c, rs.task.layer = c, rl
	c.pool.Run(r.VHeads, &rs.task)
	vd := r.ValueDim()
	for t := range c.n {
		out, z := rs.out[t*vd:(t+1)*vd], rs.z[t*vd:(t+1)*vd]
		for h := range r.VHeads {
			o := out[h*r.HeadV : (h+1)*r.HeadV]
			ops.RMSNorm(o, o, w.Norm, c.h.Eps)
			for j, zj := range z[h*r.HeadV : (h+1)*r.HeadV] {
				o[j] *= zj * ops.Sigmoid(zj)
			}
		}
	}
	c.MatMul(rs.out, &w.Out, s.Tmp)
}

// deltaTask runs the gated delta rule of one value head (the piece's index) over the
// micro-batch's tokens in order, each on its own sequence's state.
type deltaTask struct {
	c     *Runtime
	layer int
}

func (d *deltaTask) Do(h, _ int) {
	c := d.c
	rs, r := c.rec, &c.rec.r
	ch, vd, nk := r.ConvChannels(), r.ValueDim(), r.KHeads*r.HeadK
	kh := h % r.KHeads
	hs := r.HeadV * r.HeadK
	scale := float32(1 / math.Sqrt(float64(r.HeadK)))
	for t := range c.n {
		_, delta := rs.layer(int(c.ub.Seqs[t][0]), d.layer)
		x := rs.conv[t*ch : (t+1)*ch]
		q, k := x[kh*r.HeadK:(kh+1)*r.HeadK], x[nk+kh*r.HeadK:nk+(kh+1)*r.HeadK]
		v := x[2*nk+h*r.HeadV : 2*nk+(h+1)*r.HeadV]
		i := t*r.VHeads + h
		ops.DeltaRuleStep(rs.out[t*vd+h*r.HeadV:t*vd+(h+1)*r.HeadV], delta[h*hs:(h+1)*hs],
			k, q, v, r.HeadK, r.HeadV, rs.alpha[i], rs.beta[i], scale)
	}
}

// GatedQuery computes the queries of a gated attention layer (Qwen 3.5's full attention) from
// S.XN: wq [Dim -> 2·QDim] gives per head HeadDim query elements then HeadDim gate elements;
// the queries go to S.Q, the gates stay for OutputGate. Needs Hparams.Recurrent.
func (c *Runtime) GatedQuery(wq *Weight) {
	hd, heads := c.h.HeadDim, c.h.NHeads
	qg := c.rec.qg
	c.MatMul(c.S.XN, wq, qg)
	for t := range c.n {
		for h := range heads {
			src := qg[(t*heads+h)*2*hd:]
			copy(c.S.Q[(t*heads+h)*hd:(t*heads+h+1)*hd], src[:hd])
		}
	}
}

// OutputGate multiplies the attention output S.Att by sigmoid of the gates of the last
// GatedQuery.
func (c *Runtime) OutputGate() {
	hd, heads := c.h.HeadDim, c.h.NHeads
	qg := c.rec.qg
	for t := range c.n {
		for h := range heads {
			g := qg[(t*heads+h)*2*hd+hd:][:hd]
			a := c.S.Att[(t*heads+h)*hd : (t*heads+h+1)*hd]
			for j := range a {
				a[j] *= ops.Sigmoid(g[j])
			}
		}
	}
}
