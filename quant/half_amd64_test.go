package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"ubatch/internal/cpu"
)

// TestF32ToF16sMatchesGo converts floats whose top 16 bits take every value, each with low bits
// at and around the half-precision rounding boundaries (the 13 bits a half drops: below, at and
// above the midpoint, ties either way; and NaN payloads), with the F16C kernel and with the Go
// twin, and wants the same halves.
func TestF32ToF16sMatchesGo(t *testing.T) {
	if !cpu.HasAVX2 {
		t.Skip("no F16C on this CPU: F32ToF16s is its Go twin")
	}
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x5a5a, 0x8000, 0xf000, 0xffff}
	src := make([]float32, 0, 1<<16*len(lows))
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
	}
	checkF32ToF16s(t, src)
}

func checkF32ToF16s(t *testing.T, src []float32) {
	t.Helper()
	got, want := make([]uint16, len(src)+1), make([]uint16, len(src)+1)
	got[len(src)], want[len(src)] = 0xbeef, 0xbeef // nothing past len(src) is written
	F32ToF16s(got, src)
	f32ToF16sGo(want[:len(src)], src)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("element %d (float bits %#08x): %#04x, Go twin %#04x", i, math.Float32bits(src[min(i, len(src)-1)]), got[i], want[i])
		}
	}
}

func FuzzF32ToF16s(f *testing.F) {
	if !cpu.HasAVX2 {
		f.Skip("no F16C on this CPU: F32ToF16s is its Go twin")
	}
	f.Add(make([]byte, 4*37))
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 0, 0x80, 0x7f, 0, 0x10, 0, 0x38})
	f.Fuzz(func(t *testing.T, b []byte) {
		src := make([]float32, len(b)/4)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		checkF32ToF16s(t, src)
	})
}

func BenchmarkF32ToF16s(b *testing.B) {
	src, dst := make([]float32, 256), make([]uint16, 256) // one F16 KV row of 4 heads of 64
	for i := range src {
		src[i] = float32(i) * 0.37
	}
	for _, impl := range []string{"asm", "go"} {
		b.Run(impl, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if impl == "asm" {
					F32ToF16s(dst, src)
				} else {
					f32ToF16sGo(dst, src)
				}
			}
		})
	}
}
