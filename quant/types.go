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
)

// QK_K is the number of elements in a K-quant super-block.
const QK_K = 256

type typeInfo struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
	supported bool
}

// types is indexed by Type (an array, not a map: RowSize and TypeSize sit on hot paths).
var types = [...]typeInfo{
	F32:    {"F32", 1, 4, true},
	F16:    {"F16", 1, 2, true},
	BF16:   {"BF16", 1, 2, true},
	Q4_0:   {"Q4_0", 32, 18, true},
	Q4_1:   {"Q4_1", 32, 20, true},
	Q5_0:   {"Q5_0", 32, 22, true},
	Q5_1:   {"Q5_1", 32, 24, true},
	Q8_0:   {"Q8_0", 32, 34, true},
	Q8_1:   {"Q8_1", 32, 36, false},
	Q2_K:   {"Q2_K", QK_K, 84, true},
	Q3_K:   {"Q3_K", QK_K, 110, true},
	Q4_K:   {"Q4_K", QK_K, 144, true},
	Q5_K:   {"Q5_K", QK_K, 176, true},
	Q6_K:   {"Q6_K", QK_K, 210, true},
	Q8_K:   {"Q8_K", QK_K, 292, true},
	IQ4_NL: {"IQ4_NL", 32, 18, true},
	IQ4_XS: {"IQ4_XS", QK_K, 136, true},
	I8:     {"I8", 1, 1, false},
	I16:    {"I16", 1, 2, false},
	I32:    {"I32", 1, 4, false},
	I64:    {"I64", 1, 8, false},
	F64:    {"F64", 1, 8, false},
}

// info is t's entry in types; the zero typeInfo (blockSize 0) for an unknown t.
func (t Type) info() typeInfo {
	if int(t) < len(types) {
		return types[t]
	}
	return typeInfo{}
}

// Known reports whether ggml defines t with a layout ubatch knows (it may still be unsupported).
func (t Type) Known() bool { return t.info().blockSize != 0 }

// Supported reports whether ubatch can dequantize and compute with t.
func (t Type) Supported() bool { return t.info().supported }

// BlockSize is the number of elements in one block of t (1 for plain types); 0 if unknown.
func (t Type) BlockSize() int { return t.info().blockSize }

// TypeSize is the number of bytes in one block of t; 0 if unknown.
func (t Type) TypeSize() int { return t.info().typeSize }

func (t Type) String() string {
	if ti := t.info(); ti.blockSize != 0 {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// RowSize is the number of bytes that n elements of t occupy. n must be a multiple of BlockSize.
func (t Type) RowSize(n int) int {
	ti := t.info()
	if ti.blockSize == 0 {
		return 0
	}
	return n / ti.blockSize * ti.typeSize
}

// ParseType maps a name such as "q4_0" or "Q4_K" to its Type.
func ParseType(s string) (Type, error) {
	for t, ti := range types {
		if ti.blockSize != 0 && strings.EqualFold(ti.name, s) {
			return Type(t), nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", s)
}
