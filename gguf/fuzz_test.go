package gguf

import (
	"bytes"
	"testing"

	"ubatch/quant"
)

// FuzzParse feeds arbitrary bytes to Parse. Accepted inputs must satisfy the File invariants and
// survive a rewrite: writing the File and parsing the result must reproduce the same image when
// written again (byte comparison sidesteps NaN != NaN in metadata).
func FuzzParse(f *testing.F) {
	full, _ := buildTestFile(f, 0)
	f.Add(full)
	small := NewWriter()
	for _, kv := range []KV{
		{"general.architecture", "llama"},
		{"general.alignment", uint32(64)},
		{"b", []bool{true}},
		{"n", []any{[]int16{-1}, []any{}}},
	} {
		if err := small.Set(kv.Key, kv.Value); err != nil {
			f.Fatal(err)
		}
	}
	for _, tt := range []testTensor{{"a", quant.Q8_0, []uint64{32}}, {"b", quant.F16, []uint64{2, 2}}} {
		if err := small.AddTensor(tt.name, tt.typ, tt.dims, make([]byte, tt.size())); err != nil {
			f.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := small.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(header(3, 0, 0))
	f.Add(header(2, 1, 1))

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		if len(file.Metadata) != len(file.keys) || len(file.Tensors) != len(file.tensors) {
			t.Fatal("index maps out of sync with slices")
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			if uint64(len(ti.Data)) != ti.Size || uint64(ti.Type.RowSize(int(ti.Dims[0])))*ti.Rows() != ti.Size {
				t.Fatalf("tensor %q: len(Data)=%d Size=%d", ti.Name, len(ti.Data), ti.Size)
			}
			if ti.Size > 0 && &ti.Data[0] != &data[file.DataOffset+ti.Offset] {
				t.Fatalf("tensor %q data is not a slice of the image at its offset", ti.Name)
			}
		}
		first := rewrite(t, file)
		again, err := Parse(first)
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if second := rewrite(t, again); !bytes.Equal(first, second) {
			t.Fatal("rewrite is not stable")
		}
	})
}

func rewrite(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := copyWriter(t, f).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzRoundTrip writes fuzzed keys, strings, numbers and tensor bytes and expects Parse to return
// them unchanged.
func FuzzRoundTrip(f *testing.F) {
	f.Add("general.name", "stories", uint64(7), float64(-0.5), []byte{1, 2, 3, 4})
	f.Add("", "", uint64(0), float64(0), []byte{})
	f.Fuzz(func(t *testing.T, key, s string, u uint64, x float64, b []byte) {
		w := NewWriter()
		want := []KV{
			{key + ".s", s},
			{key + ".u", u},
			{key + ".i", int32(u)},
			{key + ".f", float32(x)},
			{key + ".a", []string{s, key, s}},
			{key + ".b", b},
			{key + ".n", []any{[]uint16{uint16(u)}, []string{s}}},
		}
		for _, kv := range want {
			if err := w.Set(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		dims := []uint64{uint64(len(b))}
		if err := w.AddTensor("t", quant.I8, dims, b); err != nil {
			t.Fatal(err)
		}
		file := reparse(t, w)
		got, _ := file.String(key + ".s")
		u2, _ := file.Uint(key + ".u")
		a, _ := file.Strings(key + ".a")
		raw, _ := file.Value(key + ".b")
		if got != s || u2 != u || len(a) != 3 || a[1] != key || !bytes.Equal(raw.([]byte), b) {
			t.Fatalf("values differ after round trip")
		}
		if f32, _ := file.Float(key + ".f"); f32 == f32 && float32(f32) != float32(x) {
			t.Fatalf("float %v became %v", float32(x), f32)
		}
		if ti, ok := file.Tensor("t"); !ok || !bytes.Equal(ti.Data, b) {
			t.Fatal("tensor data differs")
		}
	})
}

// copyWriter returns a Writer holding all of f: its metadata and its tensors. A parsed file it
// cannot take is the test's failure.
func copyWriter(t *testing.T, f *File) *Writer {
	t.Helper()
	w := NewWriter()
	if err := w.SetFrom(f, nil); err != nil {
		t.Fatalf("SetFrom rejects a parsed file: %v", err)
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, ti.Data); err != nil {
			t.Fatalf("AddTensor rejects parsed tensor %s: %v", ti.Name, err)
		}
	}
	return w
}
