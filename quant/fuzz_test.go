package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// fuzzTypes are the types the fuzz targets pick from (by index modulo the length); the last two
// are unsupported and must be rejected with an error.
var fuzzTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K,
	Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS, MXFP4, Q8_1, Type(123)}

// FuzzDequantize feeds arbitrary bytes as blocks of every type: Dequantize must return an error or
// fill dst, never panic; and the dot kernels must accept any weight bytes.
func FuzzDequantize(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 1, 2, 3}, uint8(3), 32)
	f.Add(make([]byte, 300), uint8(5), 256)
	f.Add([]byte{0xff, 0x7f, 0xff, 0xff}, uint8(7), 0)
	f.Fuzz(func(t *testing.T, data []byte, ti uint8, n int) {
		typ := fuzzTypes[int(ti)%len(fuzzTypes)]
		if n < 0 || n > 1<<16 {
			n = 0
		}
		// The given length, usually wrong for data, must give an error rather than a panic.
		_ = Dequantize(typ, data, make([]float32, n))
		if !typ.Supported() || typ.BlockSize() == 0 {
			if err := Dequantize(typ, nil, nil); err == nil && typ.BlockSize() == 0 {
				t.Fatalf("unknown type %v accepted", typ)
			}
			return
		}
		// A well-formed length must be accepted.
		bs, ts := typ.BlockSize(), typ.TypeSize()
		nb := len(data) / ts
		y := make([]float32, nb*bs)
		if err := Dequantize(typ, data[:nb*ts], y); err != nil {
			t.Fatalf("Dequantize(%v, %d blocks): %v", typ, nb, err)
		}
		if dot := DotGo(typ); dot != nil && nb > 0 {
			k := nb * bs
			x := make([]byte, ActType(typ).RowSize(k))
			QuantizeAct(typ, y, x)
			var out [1]float32
			dot(k, data[:nb*ts], x, 0, 1, out[:])
		}
	})
}

// FuzzQuantize quantizes arbitrary float32 bit patterns (NaN, Inf, subnormals, huge values): no
// panic, the result must dequantize, and finite inputs of moderate size must give finite outputs.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 192}, uint8(5))
	f.Add([]byte{0, 0, 192, 127, 0, 0, 128, 127}, uint8(7))
	f.Add([]byte{1, 0, 0, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, ti uint8) {
		typ := fuzzTypes[int(ti)%len(fuzzTypes)]
		bs := typ.BlockSize()
		if bs == 0 {
			if Quantize(typ, make([]float32, 32), make([]byte, 64)) == nil {
				t.Fatalf("unknown type %v accepted", typ)
			}
			return
		}
		nv := len(data) / 4
		n := (nv + bs - 1) / bs * bs
		x := make([]float32, n)
		moderate := true
		for i := 0; i < nv; i++ {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if !(abs32(x[i]) < 1e4) {
				moderate = false
			}
		}
		q := make([]byte, typ.RowSize(n))
		err := Quantize(typ, x, q)
		if !typ.Supported() {
			if err == nil {
				t.Fatalf("unsupported type %v accepted", typ)
			}
			return
		}
		if err != nil {
			t.Fatalf("Quantize(%v, %d): %v", typ, n, err)
		}
		y := make([]float32, n)
		if err := Dequantize(typ, q, y); err != nil {
			t.Fatalf("Dequantize(%v): %v", typ, err)
		}
		if moderate {
			for i, v := range y {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%v: finite input %v at %d came back as %v", typ, x[i], i, v)
				}
			}
		}
	})
}
