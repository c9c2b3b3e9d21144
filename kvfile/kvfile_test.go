package kvfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"ubatch/kvcache"
	"ubatch/quant"
)

func testLayout() Layout {
	return Layout{Model: ModelID{1, 2, 3}, DType: quant.F16, BlockSize: 4,
		Layers: []Layer{{KVHeads: 2, HeadDim: 4}, {KVHeads: 2, HeadDim: 4}}}
}

// testBlocks makes a chain of n blocks of l (the last one partial when partial > 0).
func testBlocks(l Layout, n, partial int, rng *rand.Rand) []Block {
	var out []Block
	parent := kvcache.RootKey
	for d := range n {
		cells := l.BlockSize
		if d == n-1 && partial > 0 {
			cells = partial
		}
		b := Block{Parent: parent, Depth: int32(d), Tokens: make([]int32, cells), Pos: make([]int32, cells),
			Data: make([]byte, int64(cells)*l.CellBytes())}
		for i := range cells {
			b.Tokens[i] = int32(rng.IntN(32000))
			b.Pos[i] = int32(d*l.BlockSize + i)
		}
		for i := range b.Data {
			b.Data[i] = byte(rng.Uint32())
		}
		b.Key = kvcache.ChainKey(parent, b.Tokens)
		parent = b.Key
		out = append(out, b)
	}
	return out
}

func encode(t *testing.T, l Layout, blocks []Block) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, l, blocks); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != Size(l, blocks) {
		t.Fatalf("encoded %d bytes, Size says %d", buf.Len(), Size(l, blocks))
	}
	return buf.Bytes()
}

func equalBlocks(a, b []Block) bool {
	return slices.EqualFunc(a, b, func(x, y Block) bool {
		return x.Key == y.Key && x.Parent == y.Parent && x.Depth == y.Depth && slices.Equal(x.Tokens, y.Tokens) &&
			slices.Equal(x.Pos, y.Pos) && bytes.Equal(x.Data, y.Data)
	})
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name    string
		dtype   quant.Type
		n, part int
		headDim int
	}{
		{name: "one full block f16", dtype: quant.F16, n: 1, headDim: 4},
		{name: "chain with a partial tail f32", dtype: quant.F32, n: 5, part: 3, headDim: 4},
		{name: "q8_0", dtype: quant.Q8_0, n: 3, part: 1, headDim: 32},
		{name: "no blocks", dtype: quant.F16, n: 0, headDim: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout()
			l.DType = tc.dtype
			for i := range l.Layers {
				l.Layers[i].HeadDim = tc.headDim
			}
			blocks := testBlocks(l, tc.n, tc.part, rng)
			got, err := Decode(bytes.NewReader(encode(t, l, blocks)), l, 0)
			if err != nil || !equalBlocks(got, blocks) {
				t.Fatalf("Decode = %d blocks, %v; want the %d encoded", len(got), err, len(blocks))
			}
		})
	}
}

func TestForeign(t *testing.T) {
	l := testLayout()
	data := encode(t, l, testBlocks(l, 2, 0, rand.New(rand.NewPCG(3, 4))))
	other := func(f func(*Layout)) Layout {
		o := testLayout()
		f(&o)
		return o
	}
	tests := []struct {
		name string
		want Layout
	}{
		{name: "another model", want: other(func(o *Layout) { o.Model[0] ^= 1 })},
		{name: "another dtype", want: other(func(o *Layout) { o.DType = quant.F32 })},
		{name: "another block size", want: other(func(o *Layout) { o.BlockSize = 8 })},
		{name: "another layer count", want: other(func(o *Layout) { o.Layers = o.Layers[:1] })},
		{name: "another head dim", want: other(func(o *Layout) { o.Layers[1].HeadDim = 8 })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(bytes.NewReader(data), tc.want, 0); !errors.Is(err, ErrForeign) {
				t.Fatalf("Decode = %v, want ErrForeign", err)
			}
		})
	}
}

// TestTruncated cuts an image at every offset (a write killed midway): each is rejected as
// corrupt, never decoded.
func TestTruncated(t *testing.T) {
	l := testLayout()
	data := encode(t, l, testBlocks(l, 3, 2, rand.New(rand.NewPCG(5, 6))))
	for n := range len(data) {
		if _, err := Decode(bytes.NewReader(data[:n]), l, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d of %d bytes: Decode = %v, want ErrCorrupt", n, len(data), err)
		}
	}
	if _, err := Decode(bytes.NewReader(append(slices.Clone(data), 0)), l, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte appended: Decode = %v, want ErrCorrupt", err)
	}
}

// TestBitFlips alters one bit anywhere: the checksums (or the key, or the layout) reject it.
func TestBitFlips(t *testing.T) {
	l := testLayout()
	data := encode(t, l, testBlocks(l, 2, 3, rand.New(rand.NewPCG(7, 8))))
	for i := range len(data) {
		for bit := range 8 {
			c := slices.Clone(data)
			c[i] ^= 1 << bit
			if _, err := Decode(bytes.NewReader(c), l, 0); err == nil {
				t.Fatalf("bit %d of byte %d flipped: decoded as valid", bit, i)
			}
		}
	}
}

func TestEncodeRefusesBadBlocks(t *testing.T) {
	l := testLayout()
	rng := rand.New(rand.NewPCG(9, 10))
	tests := []struct {
		name  string
		alter func(*Block)
	}{
		{name: "position off", alter: func(b *Block) { b.Pos[1]++ }},
		{name: "short data", alter: func(b *Block) { b.Data = b.Data[1:] }},
		{name: "key not its tokens' hash", alter: func(b *Block) { b.Tokens[0]++ }},
		{name: "too many cells", alter: func(b *Block) { b.Tokens, b.Pos = append(b.Tokens, 1), append(b.Pos, 4) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := testBlocks(l, 1, 0, rng)
			tc.alter(&bs[0])
			if err := Encode(&bytes.Buffer{}, l, bs); err == nil {
				t.Fatal("Encode accepted it")
			}
		})
	}
}

func TestWriteFileAtomic(t *testing.T) {
	l := testLayout()
	dir := t.TempDir()
	path := filepath.Join(dir, "x.kvb")
	blocks := testBlocks(l, 2, 0, rand.New(rand.NewPCG(11, 12)))
	size, err := WriteFile(path, l, blocks)
	if err != nil || size != Size(l, blocks) {
		t.Fatalf("WriteFile = %d, %v", size, err)
	}
	got, err := ReadFile(context.Background(), path, l, 0)
	if err != nil || !equalBlocks(got, blocks) {
		t.Fatalf("ReadFile = %v", err)
	}
	des, _ := os.ReadDir(dir)
	if len(des) != 1 {
		t.Fatalf("%d files left in the directory, want the one written", len(des))
	}
	meta, err := DecodeMeta(bytes.NewReader(encode(t, l, blocks[:1])), l)
	if err != nil || meta.Key != blocks[0].Key || !slices.Equal(meta.Tokens, blocks[0].Tokens) || meta.Data != nil {
		t.Fatalf("DecodeMeta = %+v, %v", meta, err)
	}
}

// TestWriteFileNameBound writes the longest name that fits with the temporary suffix and refuses
// one byte more before touching the directory.
func TestWriteFileNameBound(t *testing.T) {
	l := testLayout()
	blocks := testBlocks(l, 1, 0, rand.New(rand.NewPCG(15, 16)))
	tests := []struct {
		name string
		n    int
		ok   bool
	}{
		{name: "MaxName", n: MaxName, ok: true},
		{name: "MaxName+1", n: MaxName + 1},
		{name: "NAME_MAX", n: 255},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteFile(filepath.Join(dir, strings.Repeat("a", tc.n)), l, blocks)
			if (err == nil) != tc.ok {
				t.Fatalf("WriteFile of a %d-byte name: %v, want ok %v", tc.n, err, tc.ok)
			}
			des, _ := os.ReadDir(dir)
			if want := map[bool]int{true: 1, false: 0}[tc.ok]; len(des) != want {
				t.Fatalf("%d files in the directory, want %d", len(des), want)
			}
		})
	}
}

// TestReadFileRegularOnly: a FIFO without a writer and a directory are refused at once
// (ErrNotRegular), not read; a cancelled context stops a regular file's read.
func TestReadFileRegularOnly(t *testing.T) {
	l := testLayout()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	file := filepath.Join(dir, "x.kvb")
	if _, err := WriteFile(file, l, testBlocks(l, 2, 0, rand.New(rand.NewPCG(17, 18)))); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		path string
		want error
	}{
		{name: "fifo", ctx: context.Background(), path: fifo, want: ErrNotRegular},
		{name: "directory", ctx: context.Background(), path: dir, want: ErrNotRegular},
		{name: "cancelled", ctx: cancelled, path: file, want: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := ReadFile(tc.ctx, tc.path, l, 0)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("ReadFile = %v, want %v", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadFile still blocked after 5s")
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to Decode: it never panics, and what it accepts encodes back
// to the same bytes.
func FuzzDecode(f *testing.F) {
	l := testLayout()
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{0, 1, 3} {
		var buf bytes.Buffer
		if err := Encode(&buf, l, testBlocks(l, n, n%2*2, rng)); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks, err := Decode(bytes.NewReader(data), l, 16)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrForeign) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrForeign", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := Encode(&buf, l, blocks); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("accepted bytes do not encode back: %v", err)
		}
	})
}

// TestVersion1 reads images as a version 1 build wrote them (Q8_0 numbered 2): each decodes as
// the layout it names, a dtype version 1 did not have is refused, and a later version is
// foreign.
func TestVersion1(t *testing.T) {
	tests := []struct {
		name      string
		dtype     quant.Type // the layout written and wanted
		version   uint32
		code      uint32 // the dtype as the header stores it
		wantErr   bool
		wantOther bool // ErrForeign
	}{
		{name: "q8_0 as 2", dtype: quant.Q8_0, version: 1, code: 2},
		{name: "f16 as 1", dtype: quant.F16, version: 1, code: 1},
		{name: "f32 as 0", dtype: quant.F32, version: 1, code: 0},
		{name: "8 was no version 1 dtype", dtype: quant.Q8_0, version: 1, code: 8, wantErr: true},
		{name: "q8_0 as 8 in version 2", dtype: quant.Q8_0, version: 2, code: 8},
		{name: "version 4", dtype: quant.F16, version: 4, code: 1, wantErr: true, wantOther: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout()
			l.DType = tc.dtype
			for i := range l.Layers {
				l.Layers[i].HeadDim = 32
			}
			blocks := testBlocks(l, 2, 1, rand.New(rand.NewPCG(9, 10)))
			data := encode(t, l, blocks)
			le := binary.LittleEndian
			le.PutUint32(data[4:], tc.version)
			le.PutUint32(data[40:], tc.code)
			h := 4 + 4 + 32 + 12 + 8*len(l.Layers) + 8 // the header, its checksum last
			le.PutUint32(data[h-4:], crc32.Checksum(data[:h-4], castagnoli))
			got, err := Decode(bytes.NewReader(data), l, 0)
			switch {
			case tc.wantErr && err == nil:
				t.Fatalf("Decode accepted version %d dtype %d", tc.version, tc.code)
			case tc.wantOther && !errors.Is(err, ErrForeign):
				t.Fatalf("Decode = %v, want ErrForeign", err)
			case !tc.wantErr && (err != nil || !equalBlocks(got, blocks)):
				t.Fatalf("Decode = %d blocks, %v; want the %d encoded", len(got), err, len(blocks))
			}
		})
	}
}
