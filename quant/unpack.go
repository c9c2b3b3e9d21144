package quant

import "fmt"

// DequantizePackedRow writes row r of a matrix packed by PackRows (rows of k elements of wt) as
// float32 into dst (len k). It reads the panels in place, so a packed matrix that is also looked
// up by row (a token embedding tied to the output projection) needs no second copy in the file
// layout. It costs a few nanoseconds per element: fine for one row per token, not for matmuls.
func DequantizePackedRow(wt Type, k int, w []byte, r int, dst []float32) {
	unpack := wt.row().unpack
	if unpack == nil {
		panic(fmt.Sprintf("quant.DequantizePackedRow: %v weights are never packed", wt))
	}
	rowBytes := wt.RowSize(k)
	panel := w[r/PanelRows*PanelRows*rowBytes:][:PanelRows*rowBytes]
	unpack(wt, k, panel, r%PanelRows, dst[:k])
}

// unpackQ32Row is DequantizePackedRow's decoding of row lane of a Q4_0, Q8_0 or MXFP4 panel.
func unpackQ32Row(wt Type, k int, panel []byte, lane int, dst []float32) {
	bb, q0 := PanelRows*wt.TypeSize(), PanelRows*q32ScaleBytes(wt)
	for b := range k / 32 {
		pb := panel[b*bb : (b+1)*bb]
		d := panelScale(wt, pb, lane)
		for i := range 32 {
			dst[32*b+i] = d * float32(panelQuant(wt, pb[q0:], lane, i))
		}
	}
}

// unpackQ4KRow is DequantizePackedRow's decoding of row lane of a Q4_K panel.
func unpackQ4KRow(_ Type, k int, panel []byte, lane int, dst []float32) {
	for b := range k / QK_K {
		sb := panel[b*q4KPanelBytes : (b+1)*q4KPanelBytes]
		d, dmin := f16At(sb[2*lane:]), f16At(sb[16+2*lane:])
		for s := range 8 {
			sc, m := q4KPanelScaleMin(sb, lane, s)
			ds, ms := d*float32(sc), dmin*float32(m)
			for e := 32 * s; e < 32*s+32; e++ {
				dst[QK_K*b+e] = ds*float32(q4KPanelLevel(sb, lane, e)) - ms
			}
		}
	}
}

// unpackQ6KRow is DequantizePackedRow's decoding of row lane of a Q6_K panel.
func unpackQ6KRow(_ Type, k int, panel []byte, lane int, dst []float32) {
	for b := range k / QK_K {
		sb := panel[b*q6KPanelBytes : (b+1)*q6KPanelBytes]
		d := f16At(sb[2*lane:])
		for e := range QK_K {
			sc := float32(q6KPanelScale(sb, lane, e/16))
			dst[QK_K*b+e] = d * sc * float32(int32(q6KPanelLevel(sb, lane, e))-32)
		}
	}
}
