// Package quant defines ggml's tensor element types (plain floats and block-quantized formats),
// converts between them and float32, and computes dot products of weight rows with activations.
package quant

import (
	"fmt"
	"strings"
)

// Type is a ggml tensor element type; the numeric values are ggml's `enum ggml_type`, as stored in
// GGUF tensor infos.
type Type uint32

// Types ubatch knows by name. Only those with Supported() true can be computed with.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	// IQ4_NL and IQ4_XS are ggml's non-linear 4-bit types: levels from a fixed 16-entry table.
	IQ4_NL Type = 20
	IQ4_XS Type = 23
	I8     Type = 24
	I16    Type = 25
	I32    Type = 26
	I64    Type = 27
	F64    Type = 28
	BF16   Type = 30
	// MXFP4 is the OCP microscaling FP4 format (E2M1 values, an E8M0 scale per 32): gpt-oss's
	// experts.
	MXFP4 Type = 39
)

// QK_K is the number of elements in a K-quant super-block.
const QK_K = 256

// typeTraits is everything ubatch knows about one type, one row per type in types (ggml's
// type_traits): its layout, its conversions, the activation type its rows are dotted with and
// its kernels. Adding a type is adding its row (in init below) and its kernel files, whose init
// functions put their assembly into kernels (setDot, setPanel). A nil function is a thing the
// type does not have.
type typeTraits struct {
	name      string
	blockSize int // elements per block (1 for plain types)
	typeSize  int // bytes per block

	// dequant expands len(dst)/blockSize blocks of src (dequantize_row); nil: unsupported.
	dequant func(src []byte, dst []float32)
	// quantize packs len(src)/blockSize blocks into dst (ggml's quantize_row_*_ref).
	quantize func(src []float32, dst []byte)
	// act is the type activations are quantized to for dot products with rows of this type
	// (ggml's vec_dot_type; F32, the zero Type, for types without a dot product).
	act Type
	// dot is the pure-Go row dot (the twin of every assembly one); nil: no dot product.
	dot DotFunc

	// Packed weights (packed.go), for the types with a panel layout: pack rearranges file-layout
	// rows into panels (PackRows), unpack decodes row lane of one panel (DequantizePackedRow),
	// panel is the Go twin of the panel kernels (one panel at a time), and panelSums says that
	// the panel kernels take activation sums (panelSums).
	pack      func(t Type, k int, dst, src []byte) error
	unpack    func(t Type, k int, panel []byte, lane int, dst []float32)
	panel     panelTwin
	panelSums bool

	kernels typeKernels // the assembly, by kernel path; see kernel.go
}

// types is indexed by Type (an array, not a map: RowSize and TypeSize sit on hot paths). It is
// filled by init, not by a composite literal, because the functions in the rows refer to types
// themselves (through RowSize and the like), which Go forbids in a package-level initializer.
var types [MXFP4 + 1]typeTraits

func init() {
	layout := func(name string, blockSize, typeSize int) typeTraits {
		return typeTraits{name: name, blockSize: blockSize, typeSize: typeSize}
	}
	// Types ubatch knows the layout of but cannot compute with.
	def(I8, layout("I8", 1, 1))
	def(I16, layout("I16", 1, 2))
	def(I32, layout("I32", 1, 4))
	def(I64, layout("I64", 1, 8))
	def(F64, layout("F64", 1, 8))
	def(Q8_1, layout("Q8_1", 32, 36))

	def(F32, typeTraits{name: "F32", blockSize: 1, typeSize: 4, act: F32,
		dequant: dequantF32, quantize: quantizeF32, dot: dotF32Go})
	def(F16, typeTraits{name: "F16", blockSize: 1, typeSize: 2, act: F32,
		dequant: dequantF16, quantize: quantizeF16, dot: dotF16Go})
	def(BF16, typeTraits{name: "BF16", blockSize: 1, typeSize: 2, act: F32,
		dequant: dequantBF16, quantize: quantizeBF16, dot: dotBF16Go})

	def(Q4_0, typeTraits{name: "Q4_0", blockSize: 32, typeSize: q4_0Bytes, act: Q8_0,
		dequant: dequantQ4_0, quantize: quantizeQ4_0, dot: dotQ4_0Go,
		pack: packQ32Rows, unpack: unpackQ32Row, panel: panelQ4_0Go, panelSums: true})
	def(Q4_1, typeTraits{name: "Q4_1", blockSize: 32, typeSize: q4_1Bytes, act: Q8_0,
		dequant: dequantQ4_1, quantize: quantizeQ4_1, dot: dotQ4_1Go})
	def(Q5_0, typeTraits{name: "Q5_0", blockSize: 32, typeSize: q5_0Bytes, act: Q8_0,
		dequant: dequantQ5_0, quantize: quantizeQ5_0, dot: dotQ5_0Go})
	def(Q5_1, typeTraits{name: "Q5_1", blockSize: 32, typeSize: q5_1Bytes, act: Q8_0,
		dequant: dequantQ5_1, quantize: quantizeQ5_1, dot: dotQ5_1Go})
	def(Q8_0, typeTraits{name: "Q8_0", blockSize: 32, typeSize: q8_0Bytes, act: Q8_0,
		dequant: dequantQ8_0, quantize: quantizeQ8_0, dot: dotQ8_0Go,
		pack: packQ32Rows, unpack: unpackQ32Row, panel: panelQ8_0Go, panelSums: true})
	def(IQ4_NL, typeTraits{name: "IQ4_NL", blockSize: 32, typeSize: iq4NLBytes, act: Q8_0,
		dequant: dequantIQ4NL, quantize: quantizeIQ4NL, dot: dotIQ4NLGo})
	def(MXFP4, typeTraits{name: "MXFP4", blockSize: 32, typeSize: mxfp4Bytes, act: Q8_0,
		dequant: dequantMXFP4, quantize: quantizeMXFP4, dot: dotMXFP4Go,
		pack: packQ32Rows, unpack: unpackQ32Row, panel: panelMXFP4Go, panelSums: true})

	def(Q2_K, typeTraits{name: "Q2_K", blockSize: QK_K, typeSize: q2_KBytes, act: Q8_K,
		dequant: dequantQ2_K, quantize: quantizeQ2_K, dot: dotQ2_KGo})
	def(Q3_K, typeTraits{name: "Q3_K", blockSize: QK_K, typeSize: q3_KBytes, act: Q8_K,
		dequant: dequantQ3_K, quantize: quantizeQ3_K, dot: dotQ3_KGo})
	def(Q4_K, typeTraits{name: "Q4_K", blockSize: QK_K, typeSize: q4_KBytes, act: Q8_K,
		dequant: dequantQ4_K, quantize: quantizeQ4_K, dot: dotQ4_KGo,
		pack: packQ4KRows, unpack: unpackQ4KRow, panel: panelQ4KGo})
	def(Q5_K, typeTraits{name: "Q5_K", blockSize: QK_K, typeSize: q5_KBytes, act: Q8_K,
		dequant: dequantQ5_K, quantize: quantizeQ5_K, dot: dotQ5_KGo})
	def(Q6_K, typeTraits{name: "Q6_K", blockSize: QK_K, typeSize: q6_KBytes, act: Q8_K,
		dequant: dequantQ6_K, quantize: quantizeQ6_K, dot: dotQ6_KGo,
		pack: packQ6KRows, unpack: unpackQ6KRow, panel: panelQ6KGo})
	def(Q8_K, typeTraits{name: "Q8_K", blockSize: QK_K, typeSize: q8_KBytes,
		dequant: dequantQ8_K, quantize: quantizeQ8_K})
	def(IQ4_XS, typeTraits{name: "IQ4_XS", blockSize: QK_K, typeSize: iq4XSBytes, act: Q8_K,
		dequant: dequantIQ4XS, quantize: quantizeIQ4XS, dot: dotIQ4XSGo})
}

// def sets t's row to r, keeping the assembly kernels the kernel files' init functions may have
// registered already (Go runs the init functions of a package's files in file-name order).
func def(t Type, r typeTraits) {
	r.kernels = types[t].kernels
	types[t] = r
	types[t].resolve()
}

// unknownType is the row of types ubatch does not know (all zero: blockSize 0).
var unknownType typeTraits

// row is t's row in types; unknownType for an unknown t.
func (t Type) row() *typeTraits {
	if int(t) < len(types) {
		return &types[t]
	}
	return &unknownType
}

// Known reports whether ggml defines t with a layout ubatch knows (it may still be unsupported).
func (t Type) Known() bool { return t.row().blockSize != 0 }

// Supported reports whether ubatch can dequantize and compute with t.
func (t Type) Supported() bool { return t.row().dequant != nil }

// BlockSize is the number of elements in one block of t (1 for plain types); 0 if unknown.
func (t Type) BlockSize() int { return t.row().blockSize }

// TypeSize is the number of bytes in one block of t; 0 if unknown.
func (t Type) TypeSize() int { return t.row().typeSize }

func (t Type) String() string {
	if r := t.row(); r.blockSize != 0 {
		return r.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// RowSize is the number of bytes that n elements of t occupy. n must be a multiple of BlockSize.
func (t Type) RowSize(n int) int {
	r := t.row()
	if r.blockSize == 0 {
		return 0
	}
	return n / r.blockSize * r.typeSize
}

// ParseType maps a name such as "q4_0" or "Q4_K" to its Type.
func ParseType(s string) (Type, error) {
	for t := range types {
		if r := &types[t]; r.blockSize != 0 && strings.EqualFold(r.name, s) {
			return Type(t), nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", s)
}
