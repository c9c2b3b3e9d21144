package ops

import "ubatch/internal/cpu"

// The peak loops of peak_amd64.s: n iterations of 24 instructions each (n > 0).

//go:noescape
func peakVNNI512(n int)

//go:noescape
func peakVNNI256(n int)

//go:noescape
func peakAVXVNNI(n int)

//go:noescape
func peakAVX2Int8(n int)

//go:noescape
func peakAVX2Int8Signed(n int)

//go:noescape
func peakFMA512(n int)

//go:noescape
func peakFMA256(n int)

// peakLoops lists the loops this CPU runs. Ops count a multiply-add as two: an iteration of
// 24 VPDPBUSD on 512 bits is 24·64 multiply-adds; AVX2's int8 iterations are 12 products of
// 32 multiply-adds each.
func peakLoops() []PeakLoop {
	var l []PeakLoop
	if cpu.HasAVX512VNNI {
		l = append(l,
			PeakLoop{Name: "int8 vpdpbusd zmm (avx512vnni)", Kind: PeakInt8, Path: cpu.AVX512VNNI, opsPerIter: 24 * 64 * 2, run: peakVNNI512},
			PeakLoop{Name: "int8 vpdpbusd ymm (avx512vnni, evex)", Kind: PeakInt8, Path: cpu.AVX512VNNI, opsPerIter: 24 * 32 * 2, run: peakVNNI256})
	}
	if cpu.HasAVXVNNI {
		l = append(l, PeakLoop{Name: "int8 vpdpbusd ymm (avxvnni, vex)", Kind: PeakInt8, Path: cpu.AVXVNNI, opsPerIter: 24 * 32 * 2, run: peakAVXVNNI})
	}
	if cpu.HasAVX2 {
		l = append(l,
			PeakLoop{Name: "int8 vpmaddubsw+vpmaddwd ymm (avx2)", Kind: PeakInt8, Path: cpu.AVX2, opsPerIter: 12 * 32 * 2, run: peakAVX2Int8},
			// After the roofline (peakFor takes the first loop of a path): what signed
			// weights leave of it, the Q8_0 kernel's bound.
			PeakLoop{Name: "int8 vpsignb+maddubs+maddwd (avx2)", Kind: PeakInt8, Path: cpu.AVX2, opsPerIter: 12 * 32 * 2, run: peakAVX2Int8Signed})
	}
	if cpu.HasAVX512VNNI { // AVX-512 F: part of the AVX512VNNI predicate
		l = append(l, PeakLoop{Name: "f32 vfmadd231ps zmm (avx512)", Kind: PeakF32, Path: cpu.AVX512VNNI, opsPerIter: 24 * 16 * 2, run: peakFMA512})
	}
	if cpu.HasAVX2 {
		l = append(l, PeakLoop{Name: "f32 vfmadd231ps ymm (avx2)", Kind: PeakF32, Path: cpu.AVX2, opsPerIter: 24 * 8 * 2, run: peakFMA256})
	}
	return l
}
