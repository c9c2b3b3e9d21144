package gguf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"ubatch/quant"
)

// magic is "GGUF" read as a little-endian uint32.
const magic = 0x46554747

// Minimum encoded sizes, used to bound counts by the bytes left before allocating anything.
const (
	minKVSize         = 8 + 4 + 1         // key length, value type, smallest value
	minTensorInfoSize = 8 + 4 + 8 + 4 + 8 // name length, n_dims, one dim, type, offset
)

// maxPrealloc caps capacity reserved from a header count: in a multi-gigabyte model a corrupt
// count passes the size bound yet would reserve gigabytes; beyond the cap, growth follows the
// entries actually parsed.
const maxPrealloc = 4096

// Parse parses a GGUF image held in memory. The returned File's tensor Data slices alias data;
// data must not be modified while the File is in use. Every malformed input yields an error that
// names what was being read and where.
func Parse(data []byte) (*File, error) {
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return f, nil
}

func parse(data []byte) (*File, error) {
	d := &decoder{b: data}
	m, err := d.u32("magic")
	if err != nil {
		return nil, err
	}
	if m != magic {
		return nil, fmt.Errorf("bad magic %q: not a GGUF file", data[:4])
	}
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, errors.New("GGUF version 1 is not supported (its counts are 32-bit); re-convert the model with a current llama.cpp")
	case version == 2 || version == 3:
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, fmt.Errorf("big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, fmt.Errorf("unsupported GGUF version %d (want 2 or 3)", version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	f := &File{Version: version, Size: uint64(len(data))}
	f.Metadata, f.keys, err = readNamed(d, nKV, minKVSize,
		sectionNames{"metadata", "header", "entry", "key"}, d.kv, func(kv *KV) string { return kv.Key })
	if err != nil {
		return nil, err
	}
	if f.Alignment, err = alignment(f); err != nil {
		return nil, err
	}
	f.Tensors, f.tensors, err = readNamed(d, nTensors, minTensorInfoSize,
		sectionNames{"tensor", "metadata", "info", "name"}, d.tensorInfo, func(ti *TensorInfo) string { return ti.Name })
	if err != nil {
		return nil, err
	}
	// d.off <= len(data) and Alignment <= 1<<30, so this cannot overflow.
	f.DataOffset = alignUp(d.off, f.Alignment)
	if err := placeTensors(f, data); err != nil {
		return nil, err
	}
	return f, nil
}

// sectionNames are the words errors about a section of the header (the metadata, the tensor
// infos) use: "<what> count ... follow the <after>", "<what> <entry> i of n", "<what> <name> ...
// appears twice".
type sectionNames struct{ what, after, entry, name string }

// readNamed reads n entries of at least minSize bytes each with next, and the index of each
// entry's name (name) in them; a count the bytes left cannot hold is an error before anything is
// allocated, and so is a name given twice.
func readNamed[T any](d *decoder, n, minSize uint64, w sectionNames,
	next func() (T, error), name func(*T) string) ([]T, map[string]int, error) {
	if n > d.left()/minSize {
		return nil, nil, fmt.Errorf("%s count %d is impossible: only %d bytes follow the %s", w.what, n, d.left(), w.after)
	}
	out := make([]T, 0, min(n, maxPrealloc))
	index := make(map[string]int, min(n, maxPrealloc))
	for i := range n {
		e, err := next()
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s %d of %d: %w", w.what, w.entry, i, n, err)
		}
		k := name(&e)
		if _, dup := index[k]; dup {
			return nil, nil, fmt.Errorf("%s %s %q appears twice", w.what, w.name, k)
		}
		index[k] = len(out)
		out = append(out, e)
	}
	return out, index, nil
}

// alignment validates general.alignment as llama.cpp does: a non-zero power of two of type uint32.
func alignment(f *File) (uint64, error) {
	v, ok := f.Value("general.alignment")
	if !ok {
		return DefaultAlignment, nil
	}
	a, ok := v.(uint32)
	if !ok {
		return 0, fmt.Errorf("general.alignment has type %T, want uint32", v)
	}
	if a == 0 || a&(a-1) != 0 || a > 1<<30 {
		return 0, fmt.Errorf("general.alignment %d is not a power of two in [1, 2^30]", a)
	}
	return uint64(a), nil
}

// placeTensors checks every tensor's data range against the file and the other tensors and points
// Data into the image.
func placeTensors(f *File, data []byte) error {
	size := uint64(len(data))
	order := make([]int, len(f.Tensors))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		order[i] = i
		if t.Offset%f.Alignment != 0 {
			return fmt.Errorf("tensor %q offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		start, c1 := bits.Add64(f.DataOffset, t.Offset, 0)
		end, c2 := bits.Add64(start, t.Size, 0)
		if c1 != 0 || c2 != 0 {
			return fmt.Errorf("tensor %q data offset %d with size %d lies beyond any possible file: offset bogus", t.Name, t.Offset, t.Size)
		}
		if end > size {
			return fmt.Errorf("tensor %q data [%d, %d) lies outside the file (size %d): file truncated or offset bogus",
				t.Name, start, end, size)
		}
		t.Data = data[start:end:end]
	}
	// Ties broken by size so the result does not depend on sort order: an empty tensor may share
	// its offset with the next one.
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := &f.Tensors[a], &f.Tensors[b]
		return cmp.Or(cmp.Compare(ta.Offset, tb.Offset), cmp.Compare(ta.Size, tb.Size))
	})
	for k := 1; k < len(order); k++ {
		prev, cur := &f.Tensors[order[k-1]], &f.Tensors[order[k]]
		if prev.Offset+prev.Size > cur.Offset {
			return fmt.Errorf("tensor %q data [%d, %d) overlaps tensor %q data starting at %d (offsets within the data section)",
				prev.Name, prev.Offset, prev.Offset+prev.Size, cur.Name, cur.Offset)
		}
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// decoder reads little-endian GGUF primitives from b, tracking the absolute offset.
type decoder struct {
	b   []byte
	off uint64
}

func (d *decoder) left() uint64 { return uint64(len(d.b)) - d.off }

// take returns the next n bytes, or an error naming what was being read.
func (d *decoder) take(n uint64, what string) ([]byte, error) {
	if n > d.left() {
		return nil, fmt.Errorf("file truncated reading %s at offset %d: need %d bytes, %d left", what, d.off, n, d.left())
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	p, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	p, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > d.left() {
		return "", fmt.Errorf("%s length %d at offset %d exceeds the %d bytes left in the file", what, n, d.off-8, d.left())
	}
	p, _ := d.take(n, what)
	return string(p), nil
}

func (d *decoder) kv() (KV, error) {
	key, err := d.str("key")
	if err != nil {
		return KV{}, err
	}
	t, err := d.u32("value type")
	if err != nil {
		return KV{}, fmt.Errorf("key %q: %w", key, err)
	}
	v, err := d.value(valueType(t))
	if err != nil {
		return KV{}, fmt.Errorf("key %q: %w", key, err)
	}
	return KV{Key: key, Value: v}, nil
}

// value reads one top-level value of type t.
func (d *decoder) value(t valueType) (any, error) {
	switch t {
	case typeString:
		return d.str("string value")
	case typeArray:
		return d.array(1)
	}
	size := t.fixedSize()
	if size == 0 {
		return nil, fmt.Errorf("unknown value type %d at offset %d", uint32(t), d.off-4)
	}
	p, err := d.take(size, t.String()+" value")
	if err != nil {
		return nil, err
	}
	switch t {
	case typeUint8:
		return p[0], nil
	case typeInt8:
		return int8(p[0]), nil
	case typeUint16:
		return binary.LittleEndian.Uint16(p), nil
	case typeInt16:
		return int16(binary.LittleEndian.Uint16(p)), nil
	case typeUint32:
		return binary.LittleEndian.Uint32(p), nil
	case typeInt32:
		return int32(binary.LittleEndian.Uint32(p)), nil
	case typeFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(p)), nil
	case typeBool:
		return parseBool(p[0], d.off-1)
	case typeUint64:
		return binary.LittleEndian.Uint64(p), nil
	case typeInt64:
		return int64(binary.LittleEndian.Uint64(p)), nil
	default: // typeFloat64, the last fixed-size type
		return math.Float64frombits(binary.LittleEndian.Uint64(p)), nil
	}
}

func parseBool(b byte, off uint64) (bool, error) {
	if b > 1 {
		return false, fmt.Errorf("bool value %d at offset %d is neither 0 nor 1", b, off)
	}
	return b == 1, nil
}

// array reads an array's element type, count and elements; level is its nesting level (1 for a
// top-level value).
func (d *decoder) array(level int) (any, error) {
	et, err := d.u32("array element type")
	if err != nil {
		return nil, err
	}
	t := valueType(et)
	n, err := d.u64("array length")
	if err != nil {
		return nil, err
	}
	min := t.minSize()
	if min == 0 {
		return nil, fmt.Errorf("unknown array element type %d at offset %d", et, d.off-12)
	}
	if n > d.left()/min {
		return nil, fmt.Errorf("array of %d %s elements at offset %d needs at least %d bytes per element, only %d bytes left",
			n, t, d.off-8, min, d.left())
	}
	switch t {
	case typeString:
		return d.strings(n)
	case typeArray:
		if n > 0 && level+1 > maxArrayDepth {
			return nil, fmt.Errorf("arrays nested deeper than %d levels at offset %d", maxArrayDepth, d.off)
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = d.array(level + 1); err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
		}
		return out, nil
	case typeBool:
		start := d.off
		p, _ := d.take(n, "")
		out := make([]bool, n)
		for i, b := range p {
			if out[i], err = parseBool(b, start+uint64(i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// Fixed-size numeric elements: the count check above guarantees the bytes are there.
	p, _ := d.take(n*min, "")
	le := binary.LittleEndian
	switch t {
	case typeUint8:
		return append([]uint8{}, p...), nil
	case typeInt8:
		return decodeArray(p, 1, func(b []byte) int8 { return int8(b[0]) }), nil
	case typeUint16:
		return decodeArray(p, 2, le.Uint16), nil
	case typeInt16:
		return decodeArray(p, 2, func(b []byte) int16 { return int16(le.Uint16(b)) }), nil
	case typeUint32:
		return decodeArray(p, 4, le.Uint32), nil
	case typeInt32:
		return decodeArray(p, 4, func(b []byte) int32 { return int32(le.Uint32(b)) }), nil
	case typeFloat32:
		return decodeArray(p, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }), nil
	case typeUint64:
		return decodeArray(p, 8, le.Uint64), nil
	case typeInt64:
		return decodeArray(p, 8, func(b []byte) int64 { return int64(le.Uint64(b)) }), nil
	default: // typeFloat64
		return decodeArray(p, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }), nil
	}
}

// strings reads n length-prefixed strings. They share one backing allocation: vocabularies hold
// tens of thousands of short strings, and one allocation each would dominate parsing time.
func (d *decoder) strings(n uint64) ([]string, error) {
	start := d.off
	total := uint64(0)
	for i := range n {
		s, err := d.u64("array string length")
		if err == nil && s > d.left() {
			err = fmt.Errorf("array string length %d at offset %d exceeds the %d bytes left in the file", s, d.off-8, d.left())
		}
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		d.off += s
		total += s
	}
	var sb strings.Builder
	sb.Grow(int(total))
	d.off = start
	for range n {
		s, _ := d.u64("")
		p, _ := d.take(s, "")
		sb.Write(p)
	}
	all := sb.String()
	out := make([]string, n)
	d.off = start
	pos := uint64(0)
	for i := range out {
		s, _ := d.u64("")
		out[i] = all[pos : pos+s]
		pos += s
		d.off += s
	}
	return out, nil
}

// decodeArray decodes len(p)/size elements of size bytes each with get.
func decodeArray[T any](p []byte, size int, get func([]byte) T) []T {
	out := make([]T, len(p)/size)
	for i := range out {
		out[i] = get(p[i*size:])
	}
	return out
}

// tensorInfo reads one tensor descriptor and validates its name, shape and type.
func (d *decoder) tensorInfo() (TensorInfo, error) {
	name, err := d.str("tensor name")
	if err != nil {
		return TensorInfo{}, err
	}
	if name == "" {
		return TensorInfo{}, errors.New("empty tensor name")
	}
	if len(name) > maxNameLen {
		return TensorInfo{}, fmt.Errorf("tensor name %q is %d bytes long (ggml allows at most %d)", name, len(name), maxNameLen)
	}
	fail := func(err error) (TensorInfo, error) { return TensorInfo{}, fmt.Errorf("tensor %q: %w", name, err) }
	invalid := func(err error) (TensorInfo, error) { return TensorInfo{}, fmt.Errorf("tensor %q %w", name, err) }
	nDims, err := d.u32("dimension count")
	if err != nil {
		return fail(err)
	}
	if nDims == 0 || nDims > maxDims {
		return invalid(fmt.Errorf("has %d dimensions (want 1 to %d)", nDims, maxDims))
	}
	dims := make([]uint64, nDims)
	for i := range dims {
		if dims[i], err = d.u64("dimension"); err != nil {
			return fail(err)
		}
	}
	typ, err := d.u32("tensor type")
	if err != nil {
		return fail(err)
	}
	offset, err := d.u64("tensor data offset")
	if err != nil {
		return fail(err)
	}
	t := TensorInfo{Name: name, Type: quant.Type(typ), Dims: dims, Offset: offset}
	if t.Size, err = tensorSize(t.Type, dims); err != nil {
		return invalid(err)
	}
	return t, nil
}

// tensorSize validates a tensor's type and shape and returns its data size in bytes. Errors read
// as a predicate of the tensor ("has unknown type 42").
func tensorSize(typ quant.Type, dims []uint64) (uint64, error) {
	if !typ.Known() {
		return 0, fmt.Errorf("has unknown type %d", uint32(typ))
	}
	elems := uint64(1)
	for _, n := range dims {
		hi, lo := bits.Mul64(elems, n)
		// ggml stores dimensions and element counts as int64.
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("has shape %v with more than 2^63-1 elements", dims)
		}
		elems = lo
	}
	bs := uint64(typ.BlockSize())
	if dims[0]%bs != 0 {
		return 0, fmt.Errorf("has row length %d, not a multiple of the %s block size %d", dims[0], typ, bs)
	}
	hi, size := bits.Mul64(elems/bs, uint64(typ.TypeSize()))
	if hi != 0 {
		return 0, fmt.Errorf("has shape %v of type %s needing more than 2^64 bytes", dims, typ)
	}
	return size, nil
}
