// Package gguf reads and writes GGUF files, ggml's model container: a header, typed key-value
// metadata, tensor descriptors and an aligned blob of tensor data.
//
// Reading memory-maps the file (Open) or parses an in-memory image (Parse); tensor data is never
// copied, each TensorInfo.Data is a slice of the mapping. Versions 2 and 3 (little-endian) are
// read; the Writer produces version 3.
package gguf

import (
	"math"

	"ubatch/quant"
)

// DefaultAlignment is the tensor data alignment used when general.alignment is absent.
const DefaultAlignment = 32

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// maxNameLen is the longest tensor name ggml accepts (GGML_MAX_NAME is 64 including the NUL).
const maxNameLen = 63

// KV is one metadata entry. Value holds the natural Go type of the GGUF value: uint8, int8, uint16,
// int16, uint32, int32, float32, bool, string, uint64, int64, float64; arrays as the typed slice of
// their element type ([]uint8, []int32, []float32, []string, ...); an array of arrays as []any
// whose elements are again such slices.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor and holds its data.
type TensorInfo struct {
	Name string
	Type quant.Type
	// Dims is the shape in GGUF (ggml) order: Dims[0] is the row length, the innermost and
	// contiguous dimension; 1 to 4 entries.
	Dims []uint64
	// Offset is the start of the data relative to the file's data section (File.DataOffset).
	Offset uint64
	// Size is the data length in bytes: Type.RowSize(Dims[0]) times the number of rows.
	Size uint64
	// Data is the tensor's bytes, len Size, a slice of the file image. It is read-only (a
	// memory mapping faults on writes) and valid only until File.Close.
	Data []byte
}

// NumElements is the product of the dimensions.
func (t *TensorInfo) NumElements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Rows is the number of rows: the product of all dimensions but the first.
func (t *TensorInfo) Rows() uint64 {
	if len(t.Dims) == 0 {
		return 1
	}
	n := uint64(1)
	for _, d := range t.Dims[1:] {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Its metadata and tensor infos are plain Go values; tensor data
// points into the file image, so the File must stay open while tensors are in use. A File is
// not modified after parsing, so concurrent readers are safe (Close excepted).
type File struct {
	Version  uint32
	Metadata []KV // in file order; keys are unique
	Tensors  []TensorInfo
	// Alignment is the data alignment: general.alignment, or DefaultAlignment.
	Alignment uint64
	// DataOffset is the absolute file offset of the data section: the end of the tensor infos
	// rounded up to Alignment. With no tensors it may lie past the end of the file.
	DataOffset uint64
	// Size is the size of the file image in bytes.
	Size uint64

	keys    map[string]int // metadata key -> index into Metadata
	tensors map[string]int // tensor name -> index into Tensors
	unmap   func() error   // releases the file image; nil once closed or for Parse
}

// Close releases the file mapping; tensor Data slices must not be used afterwards. Closing twice
// or closing a File from Parse is a no-op.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	u := f.unmap
	f.unmap = nil
	return u()
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Value returns the raw metadata value for key.
func (f *File) Value(key string) (any, bool) {
	i, ok := f.keys[key]
	if !ok {
		return nil, false
	}
	return f.Metadata[i].Value, true
}

// Architecture returns general.architecture, or "" when absent.
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Value(key)
	s, ok := v.(string)
	return s, ok
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Value(key)
	b, ok := v.(bool)
	return b, ok
}

// Uint returns an integer value of any integer type that is non-negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Value(key)
	return toUint(v)
}

// Int returns an integer value of any integer type that fits in an int64.
func (f *File) Int(key string) (int64, bool) {
	v, _ := f.Value(key)
	return toInt(v)
}

// Float returns a value of any numeric type as a float64.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Value(key)
	switch v := v.(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	if i, ok := toInt(v); ok {
		return float64(i), true
	}
	if u, ok := toUint(v); ok {
		return float64(u), true
	}
	return 0, false
}

// Strings returns an array of strings. The slice is shared with the File: do not modify it.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Value(key)
	s, ok := v.([]string)
	return s, ok
}

// Float32s returns a numeric array as float32s. A []float32 value is returned as is (shared with
// the File: do not modify it); other numeric arrays are converted into a new slice.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Value(key)
	switch v := v.(type) {
	case []float32:
		return v, true
	case []float64:
		return convert(v, func(x float64) (float32, bool) { return float32(x), true })
	}
	return convertInts(v, func(x int64) (float32, bool) { return float32(x), true },
		func(x uint64) (float32, bool) { return float32(x), true })
}

// Int32s returns an integer array of any integer type as int32s; ok is false if an element does
// not fit. A []int32 value is returned as is (shared with the File: do not modify it).
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Value(key)
	if s, ok := v.([]int32); ok {
		return s, true
	}
	return convertInts(v,
		func(x int64) (int32, bool) { return int32(x), x >= math.MinInt32 && x <= math.MaxInt32 },
		func(x uint64) (int32, bool) { return int32(x), x <= math.MaxInt32 })
}

// convertInts converts any integer slice element-wise, using fromInt for signed element types and
// fromUint for unsigned ones; ok is false for non-integer values or a failed element.
func convertInts[T any](v any, fromInt func(int64) (T, bool), fromUint func(uint64) (T, bool)) ([]T, bool) {
	switch v := v.(type) {
	case []int8:
		return convert(v, func(x int8) (T, bool) { return fromInt(int64(x)) })
	case []int16:
		return convert(v, func(x int16) (T, bool) { return fromInt(int64(x)) })
	case []int32:
		return convert(v, func(x int32) (T, bool) { return fromInt(int64(x)) })
	case []int64:
		return convert(v, fromInt)
	case []uint8:
		return convert(v, func(x uint8) (T, bool) { return fromUint(uint64(x)) })
	case []uint16:
		return convert(v, func(x uint16) (T, bool) { return fromUint(uint64(x)) })
	case []uint32:
		return convert(v, func(x uint32) (T, bool) { return fromUint(uint64(x)) })
	case []uint64:
		return convert(v, fromUint)
	}
	return nil, false
}

func convert[S, T any](s []S, f func(S) (T, bool)) ([]T, bool) {
	out := make([]T, len(s))
	for i, x := range s {
		y, ok := f(x)
		if !ok {
			return nil, false
		}
		out[i] = y
	}
	return out, true
}

func toUint(v any) (uint64, bool) {
	switch v := v.(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	}
	if i, ok := toInt(v); ok && i >= 0 {
		return uint64(i), true
	}
	return 0, false
}

func toInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int8:
		return int64(v), true
	case int16:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), true
		}
	}
	return 0, false
}
