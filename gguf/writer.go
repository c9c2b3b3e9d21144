package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"ubatch/internal/iocount"
	"ubatch/quant"
)

// Writer builds a GGUF version 3 file: metadata in insertion order, then tensors in the order
// they were added, each tensor's data aligned to general.alignment (DefaultAlignment if unset).
// Values and tensor data are retained, not copied: they must stay unchanged until written.
type Writer struct {
	kvs     []KV
	keys    map[string]int
	tensors []TensorInfo // Offset and Data set; Offset relative to the data section
	names   map[string]bool
	dataEnd uint64 // end of the last tensor's data, before alignment padding
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]int{}, names: map[string]bool{}}
}

// Set stores a metadata value, replacing an existing key in place (keeping its position) or
// appending a new one. value must be one of the Go types Parse produces (see KV).
// general.alignment must be a uint32 power of two, and may only be set before tensors are added.
func (w *Writer) Set(key string, value any) error {
	if _, _, err := typeOf(value); err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if key == "general.alignment" {
		a, ok := value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<30 {
			return fmt.Errorf("gguf: general.alignment must be a uint32 power of two in [1, 2^30], got %T %v", value, value)
		}
		if len(w.tensors) > 0 {
			return errors.New("gguf: general.alignment must be set before tensors are added")
		}
	}
	if i, ok := w.keys[key]; ok {
		w.kvs[i].Value = value
		return nil
	}
	w.keys[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{Key: key, Value: value})
	return nil
}

// SetFrom copies f's metadata, in f's order, for every key keep accepts (all keys if keep is nil).
// Keys already set are replaced in place.
func (w *Writer) SetFrom(f *File, keep func(key string) bool) error {
	for _, kv := range f.Metadata {
		if keep != nil && !keep(kv.Key) {
			continue
		}
		if err := w.Set(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) alignment() uint64 {
	if i, ok := w.keys["general.alignment"]; ok {
		return uint64(w.kvs[i].Value.(uint32))
	}
	return DefaultAlignment
}

// AddTensor appends a tensor. dims is in GGUF order (dims[0] is the row length, a multiple of the
// type's block size; 1 to 4 dims); data must hold exactly typ.RowSize(dims[0]) bytes per row.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64, data []byte) error {
	if name == "" {
		return errors.New("gguf: empty tensor name")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("gguf: tensor name %q is %d bytes long (ggml allows at most %d)", name, len(name), maxNameLen)
	}
	if w.names[name] {
		return fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return fmt.Errorf("gguf: tensor %q has %d dimensions (want 1 to %d)", name, len(dims), maxDims)
	}
	size, err := tensorSize(typ, dims)
	if err != nil {
		return fmt.Errorf("gguf: tensor %q %w", name, err)
	}
	if uint64(len(data)) != size {
		return fmt.Errorf("gguf: tensor %q (%s %v) needs %d bytes of data, got %d", name, typ, dims, size, len(data))
	}
	offset := alignUp(w.dataEnd, w.alignment())
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{
		Name: name, Type: typ, Dims: append([]uint64(nil), dims...),
		Offset: offset, Size: size, Data: data,
	})
	w.dataEnd = offset + size
	return nil
}

// WriteTo writes the complete file to out and returns the number of bytes written.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	hdr := binary.LittleEndian.AppendUint32(nil, magic)
	hdr = binary.LittleEndian.AppendUint32(hdr, 3)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(w.tensors)))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		// Re-check: a retained []any may have been changed since Set.
		if _, _, err := typeOf(kv.Value); err != nil {
			return 0, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
		hdr = appendString(hdr, kv.Key)
		hdr = appendValue(hdr, kv.Value)
	}
	for _, t := range w.tensors {
		hdr = appendString(hdr, t.Name)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			hdr = binary.LittleEndian.AppendUint64(hdr, d)
		}
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(t.Type))
		hdr = binary.LittleEndian.AppendUint64(hdr, t.Offset)
	}
	align := w.alignment()
	if len(w.tensors) > 0 {
		// Like gguf-py, a file without tensors ends right after the infos, unpadded.
		hdr = append(hdr, make([]byte, alignUp(uint64(len(hdr)), align)-uint64(len(hdr)))...)
	}

	cw := &iocount.Writer{W: out}
	bw := bufio.NewWriterSize(cw, 1<<20)
	_, err := bw.Write(hdr)
	pos := uint64(0) // offset within the data section
	for _, t := range w.tensors {
		if err != nil {
			break
		}
		if _, err = bw.Write(make([]byte, t.Offset-pos)); err != nil {
			break
		}
		_, err = bw.Write(t.Data)
		pos = t.Offset + t.Size
	}
	if err == nil && len(w.tensors) > 0 {
		// llama.cpp pads the last tensor too, so the file size is a multiple of the alignment.
		_, err = bw.Write(make([]byte, alignUp(pos, align)-pos))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return cw.N, fmt.Errorf("gguf: write: %w", err)
	}
	return cw.N, nil
}

// WriteFile writes the file to a temporary file next to path and renames it over path, so path
// never holds a partial file. Rewriting a file that is open (tensor data taken from its mapping)
// is safe: the old mapping keeps the replaced file's contents.
func (w *Writer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := w.WriteTo(tmp); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail(fmt.Errorf("gguf: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(fmt.Errorf("gguf: %w", err))
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gguf: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// appendValue appends a value's type tag and encoding. v must have passed typeOf.
func appendValue(b []byte, v any) []byte {
	t, _, _ := typeOf(v)
	b = binary.LittleEndian.AppendUint32(b, uint32(t))
	if t == typeArray {
		return appendArray(b, v)
	}
	return appendScalar(b, v)
}

func appendScalar(b []byte, v any) []byte {
	le := binary.LittleEndian
	switch v := v.(type) {
	case uint8:
		return append(b, v)
	case int8:
		return append(b, byte(v))
	case uint16:
		return le.AppendUint16(b, v)
	case int16:
		return le.AppendUint16(b, uint16(v))
	case uint32:
		return le.AppendUint32(b, v)
	case int32:
		return le.AppendUint32(b, uint32(v))
	case float32:
		return le.AppendUint32(b, math.Float32bits(v))
	case bool:
		return appendBool(b, v)
	case string:
		return appendString(b, v)
	case uint64:
		return le.AppendUint64(b, v)
	case int64:
		return le.AppendUint64(b, uint64(v))
	case float64:
		return le.AppendUint64(b, math.Float64bits(v))
	}
	panic(fmt.Sprintf("gguf: appendScalar of unchecked type %T", v))
}

// appendArray appends an array's element type, length and elements (without the array tag).
func appendArray(b []byte, v any) []byte {
	_, et, _ := typeOf(v)
	b = binary.LittleEndian.AppendUint32(b, uint32(et))
	switch v := v.(type) {
	case []uint8:
		return append(appendLen(b, len(v)), v...)
	case []int8:
		return appendEach(b, v)
	case []uint16:
		return appendEach(b, v)
	case []int16:
		return appendEach(b, v)
	case []uint32:
		return appendEach(b, v)
	case []int32:
		return appendEach(b, v)
	case []float32:
		return appendEach(b, v)
	case []bool:
		return appendEach(b, v)
	case []string:
		return appendEach(b, v)
	case []uint64:
		return appendEach(b, v)
	case []int64:
		return appendEach(b, v)
	case []float64:
		return appendEach(b, v)
	case []any:
		b = appendLen(b, len(v))
		for _, e := range v {
			b = appendArray(b, e)
		}
		return b
	}
	panic(fmt.Sprintf("gguf: appendArray of unchecked type %T", v))
}

func appendLen(b []byte, n int) []byte { return binary.LittleEndian.AppendUint64(b, uint64(n)) }

func appendEach[T any](b []byte, s []T) []byte {
	b = appendLen(b, len(s))
	for _, x := range s {
		b = appendScalar(b, x)
	}
	return b
}
