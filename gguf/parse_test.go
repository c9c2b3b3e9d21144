package gguf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/quant"
)

// Raw encoders for hand-built (often malformed) images.
func u32b(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64b(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func strb(s string) []byte { return append(u64b(uint64(len(s))), s...) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func header(version uint32, nTensors, nKV uint64) []byte {
	return cat([]byte("GGUF"), u32b(version), u64b(nTensors), u64b(nKV))
}

func kvb(key string, t valueType, payload ...[]byte) []byte {
	return cat(strb(key), u32b(uint32(t)), cat(payload...))
}

func tensorb(name string, dims []uint64, typ uint32, offset uint64) []byte {
	b := cat(strb(name), u32b(uint32(len(dims))))
	for _, d := range dims {
		b = append(b, u64b(d)...)
	}
	return cat(b, u32b(typ), u64b(offset))
}

// withData pads the image to align and appends n zero bytes of tensor data.
func withData(img []byte, align, n int) []byte {
	for len(img)%align != 0 {
		img = append(img, 0)
	}
	return append(img, make([]byte, n)...)
}

func TestParseErrors(t *testing.T) {
	f32 := uint32(quant.F32)
	oneTensor := func(name string, dims []uint64, typ uint32, offset uint64, data int) []byte {
		return withData(cat(header(3, 1, 0), tensorb(name, dims, typ, offset)), 32, data)
	}
	deep := cat(header(3, 0, 1), strb("k"), u32b(uint32(typeArray)))
	for range maxArrayDepth {
		deep = cat(deep, u32b(uint32(typeArray)), u64b(1))
	}
	deep = cat(deep, u32b(uint32(typeUint8)), u64b(0))

	for _, tc := range []struct {
		name string
		img  []byte
		want string
	}{
		{"empty", nil, "truncated reading magic at offset 0: need 4 bytes, 0 left"},
		{"bad magic", cat([]byte("GGML"), u32b(3)), `bad magic "GGML"`},
		{"version 1", header(1, 0, 0), "version 1 is not supported"},
		{"version 4", header(4, 0, 0), "unsupported GGUF version 4"},
		{"big endian", cat([]byte("GGUF"), []byte{0, 0, 0, 3}), "big-endian"},
		{"truncated counts", cat([]byte("GGUF"), u32b(3), u64b(0)), "truncated reading metadata count at offset 16"},
		{"absurd metadata count", header(3, 0, 1<<62), "metadata count 4611686018427387904 is impossible"},
		{"absurd tensor count", header(3, 1<<62, 0), "tensor count 4611686018427387904 is impossible"},
		{"huge key length", cat(header(3, 0, 1), u64b(1<<60), make([]byte, 16)), "key length 1152921504606846976 at offset 24 exceeds the 16 bytes left"},
		{"unknown value type", cat(header(3, 0, 1), kvb("k", 13), make([]byte, 8)), `key "k": unknown value type 13`},
		{"truncated value", cat(header(3, 0, 1), kvb("k", typeUint64, u32b(0))), `key "k": file truncated reading uint64 value`},
		{"bool 2", cat(header(3, 0, 1), kvb("k", typeBool, []byte{2})), "bool value 2 at offset 37 is neither 0 nor 1"},
		{"bool array 7", cat(header(3, 0, 1), kvb("k", typeArray, u32b(uint32(typeBool)), u64b(2), []byte{1, 7})), "bool value 7"},
		{"unknown array type", cat(header(3, 0, 1), kvb("k", typeArray, u32b(99), u64b(1)), make([]byte, 8)), "unknown array element type 99"},
		{"huge array", cat(header(3, 0, 1), kvb("k", typeArray, u32b(uint32(typeUint32)), u64b(1<<61)), make([]byte, 64)), "array of 2305843009213693952 uint32 elements"},
		{"huge string array", cat(header(3, 0, 1), kvb("k", typeArray, u32b(uint32(typeString)), u64b(100)), make([]byte, 64)), "array of 100 string elements"},
		{"truncated string in array", cat(header(3, 0, 1), kvb("k", typeArray, u32b(uint32(typeString)), u64b(2), strb("ab"), u64b(5), []byte("xy"))), "element 1: array string length 5"},
		{"too deep", deep, "nested deeper than 8 levels"},
		{"duplicate key", cat(header(3, 0, 2), kvb("a", typeUint8, []byte{1}), kvb("a", typeUint8, []byte{2})), `metadata key "a" appears twice`},
		{"alignment type", cat(header(3, 0, 1), kvb("general.alignment", typeUint64, u64b(32))), "general.alignment has type uint64, want uint32"},
		{"alignment zero", cat(header(3, 0, 1), kvb("general.alignment", typeUint32, u32b(0))), "general.alignment 0 is not a power of two"},
		{"alignment 48", cat(header(3, 0, 1), kvb("general.alignment", typeUint32, u32b(48))), "general.alignment 48 is not a power of two"},
		{"unknown tensor type", oneTensor("t", []uint64{4}, 42, 0, 16), `tensor "t" has unknown type 42`},
		{"zero dims", oneTensor("t", nil, f32, 0, 16), `tensor "t" has 0 dimensions`},
		{"five dims", oneTensor("t", []uint64{1, 1, 1, 1, 1}, f32, 0, 16), `tensor "t" has 5 dimensions`},
		{"block size", oneTensor("t", []uint64{33}, uint32(quant.Q8_0), 0, 64), `tensor "t" has row length 33, not a multiple of the Q8_0 block size 32`},
		{"element overflow", oneTensor("t", []uint64{1 << 32, 1 << 31}, f32, 0, 16), "more than 2^63-1 elements"},
		{"empty name", oneTensor("", []uint64{4}, f32, 0, 16), "empty tensor name"},
		{"long name", oneTensor(strings.Repeat("x", 64), []uint64{4}, f32, 0, 16), "is 64 bytes long"},
		{"bogus offset", oneTensor("t", []uint64{4}, f32, 1<<40, 16), `tensor "t" data [1099511627840, 1099511627856) lies outside the file (size 80): file truncated or offset bogus`},
		{"overflowing offset", oneTensor("t", []uint64{4}, f32, 1<<64-32, 16), `tensor "t" data offset 18446744073709551584 with size 16 lies beyond any possible file`},
		{"truncated data", oneTensor("t", []uint64{8}, f32, 0, 31), `tensor "t" data [64, 96) lies outside the file (size 95)`},
		{"misaligned offset", oneTensor("t", []uint64{4}, f32, 4, 32), `tensor "t" offset 4 is not a multiple of the alignment 32`},
		{"overlap", withData(cat(header(3, 2, 0), tensorb("a", []uint64{16}, f32, 32), tensorb("b", []uint64{16}, f32, 0)), 32, 128),
			`tensor "b" data [0, 64) overlaps tensor "a" data starting at 32`},
		{"duplicate tensor", withData(cat(header(3, 2, 0), tensorb("a", []uint64{8}, f32, 0), tensorb("a", []uint64{8}, f32, 32)), 32, 64),
			`tensor name "a" appears twice`},
		{"truncated tensor info", cat(header(3, 1, 0), strb("t"), u32b(2), u64b(4), make([]byte, 17)), `tensor info 0 of 1: tensor "t": file truncated reading tensor data offset at offset 57`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(tc.img)
			if err == nil {
				t.Fatalf("parsed without error: %+v", f)
			}
			if !strings.HasPrefix(err.Error(), "gguf: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		img  []byte
	}{
		{"minimal v3", header(3, 0, 0)},
		{"minimal v2", header(2, 0, 0)},
		{"zero-element tensor", withData(cat(header(3, 1, 0), tensorb("t", []uint64{0, 3}, uint32(quant.F32), 0)), 32, 0)},
		{"empty tensor sharing an offset", withData(cat(header(3, 2, 0),
			tensorb("b", []uint64{16}, uint32(quant.F32), 0), tensorb("e", []uint64{0}, uint32(quant.F32), 0)), 32, 64)},
		{"known but unsupported type", withData(cat(header(3, 1, 0), tensorb("t", []uint64{32}, uint32(quant.Q4_1), 0)), 32, 20)},
		{"alignment 1", cat(header(3, 1, 1), kvb("general.alignment", typeUint32, u32b(1)), tensorb("t", []uint64{1}, uint32(quant.I8), 0), []byte{7})},
		{"max nesting", func() []byte {
			b := cat(header(3, 0, 1), strb("k"), u32b(uint32(typeArray)))
			for range maxArrayDepth - 1 {
				b = cat(b, u32b(uint32(typeArray)), u64b(1))
			}
			return cat(b, u32b(uint32(typeUint8)), u64b(1), []byte{5})
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.img); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTruncatedEverywhere cuts a valid file at every length: each cut before the end of the last
// tensor's data must be an error (and none may panic); cuts in the final padding are still valid.
func TestTruncatedEverywhere(t *testing.T) {
	img, _ := buildTestFile(t, 0)
	f, err := Parse(img)
	if err != nil {
		t.Fatal(err)
	}
	var dataEnd uint64
	for _, ti := range f.Tensors {
		dataEnd = max(dataEnd, f.DataOffset+ti.Offset+ti.Size)
	}
	for n := range len(img) {
		_, err := Parse(img[:n])
		switch {
		case uint64(n) < dataEnd && err == nil:
			t.Fatalf("cut at %d of %d (data ends at %d): no error", n, len(img), dataEnd)
		case uint64(n) >= dataEnd && err != nil:
			t.Fatalf("cut at %d in the trailing padding: %v", n, err)
		case err != nil && !strings.HasPrefix(err.Error(), "gguf: "):
			t.Fatalf("cut at %d: error without package prefix: %v", n, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"missing", filepath.Join(dir, "nope.gguf"), "no such file"},
		{"directory", dir, "not a regular file"},
		{"empty", write("empty.gguf", nil), "is empty"},
		{"garbage", write("garbage.gguf", []byte("hello world")), "bad magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(tc.path)
			if err == nil {
				f.Close()
				t.Fatal("opened without error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q should contain %q and the path", err, tc.want)
			}
		})
	}
}
