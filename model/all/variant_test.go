package all_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/synth"
)

// maxVariantBytes bounds a variant tensor's data, so that a fuzzed shape cannot make the test
// allocate gigabytes.
const maxVariantBytes = 4 << 20

var errTooLarge = errors.New("variant tensor too large")

// tensorBytes is the data size of a tensor of type t and shape dims, false when it is not a
// whole number of blocks or over maxVariantBytes.
func tensorBytes(t quant.Type, dims []uint64) (uint64, bool) {
	if len(dims) == 0 || !t.Known() || dims[0]%uint64(t.BlockSize()) != 0 {
		return 0, true // the writer reports the bad shape
	}
	rows := uint64(1)
	for _, d := range dims[1:] {
		if d > maxVariantBytes {
			return 0, false
		}
		rows *= d
		if rows > maxVariantBytes {
			return 0, false
		}
	}
	if dims[0] > maxVariantBytes {
		return 0, false
	}
	size := rows * uint64(t.RowSize(int(dims[0])))
	return size, size <= maxVariantBytes
}

// fixture is one family's mini synth model (synth.Fixture, Q8_0), parsed: the valid file the
// bad-input tests and the loader fuzz target derive their variants from.
type fixture struct {
	arch synth.Arch
	file *gguf.File
}

func fixtures(tb testing.TB) []fixture {
	tb.Helper()
	var out []fixture
	for _, a := range synth.Archs {
		w, err := synth.Fixture(a.Name, "q8_0")
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, fixture{a, testmodel.Parse(tb, w)})
	}
	return out
}

// tensorEdit is a tensor of a variant: the base tensor's name, type and shape, possibly changed.
type tensorEdit struct {
	Name string
	Type quant.Type
	Dims []uint64
	Data []byte // the base tensor's bytes: cut or zero-extended to the new size
}

// variant is a copy of base's metadata and tensors that a test edits and then writes.
type variant struct {
	Meta    []gguf.KV
	Tensors []tensorEdit
}

func newVariant(base *gguf.File) *variant {
	v := &variant{Meta: slices.Clone(base.Metadata)}
	for _, t := range base.Tensors {
		v.Tensors = append(v.Tensors, tensorEdit{t.Name, t.Type, slices.Clone(t.Dims), t.Data})
	}
	return v
}

// set replaces key's value, appends the key when absent, or drops it when val is nil.
func (v *variant) set(key string, val any) {
	i := slices.IndexFunc(v.Meta, func(kv gguf.KV) bool { return kv.Key == key })
	switch {
	case i < 0 && val != nil:
		v.Meta = append(v.Meta, gguf.KV{Key: key, Value: val})
	case i >= 0 && val == nil:
		v.Meta = slices.Delete(v.Meta, i, i+1)
	case i >= 0:
		v.Meta[i].Value = val
	}
}

func (v *variant) tensor(name string) *tensorEdit {
	i := slices.IndexFunc(v.Tensors, func(t tensorEdit) bool { return t.Name == name })
	if i < 0 {
		return nil
	}
	return &v.Tensors[i]
}

func (v *variant) dropTensor(name string) {
	v.Tensors = slices.DeleteFunc(v.Tensors, func(t tensorEdit) bool { return t.Name == name })
}

// encode writes the variant as a GGUF image; an error means gguf's writer refuses it (e.g. a row
// length that is not a multiple of the type's block size), so the variant is not parseable.
func (v *variant) encode() ([]byte, error) {
	w := gguf.NewWriter()
	for _, kv := range v.Meta {
		if err := w.Set(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	for _, t := range v.Tensors {
		size, ok := tensorBytes(t.Type, t.Dims)
		if !ok {
			return nil, errTooLarge
		}
		data := t.Data
		if uint64(len(data)) != size {
			data = make([]byte, size)
			copy(data, t.Data)
		}
		if err := w.AddTensor(t.Name, t.Type, t.Dims, data); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
