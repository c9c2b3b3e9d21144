package kvcache

import (
	"math"
	"strings"
	"testing"

	"ubatch/quant"
)

func TestPoolBytes(t *testing.T) {
	tests := []struct {
		name                  string
		nLayers, kvDim, cells int
		dt                    quant.Type
		want                  int64
		wantErr               string
	}{
		// stories260K: 5 layers, 4 KV heads of 8: 2*5*32*2 + 8 bytes a cell.
		{name: "stories260K F16", nLayers: 5, kvDim: 32, cells: 512, dt: quant.F16, want: 512 * 648},
		{name: "stories260K F32", nLayers: 5, kvDim: 32, cells: 512, dt: quant.F32, want: 512 * 1288},
		// Llama 3 8B: 32 layers, 8 KV heads of 128, F16: 128 KiB a cell, 1 GiB for 8192.
		{name: "8B-class F16", nLayers: 32, kvDim: 1024, cells: 8192, dt: quant.F16, want: 8192 * (131072 + 8)},
		// Q8_0: 34 bytes per 32 values, 53% of F16.
		{name: "stories260K Q8_0", nLayers: 5, kvDim: 32, cells: 512, dt: quant.Q8_0, want: 512 * (2*5*34 + 8)},
		{name: "8B-class Q8_0", nLayers: 32, kvDim: 1024, cells: 8192, dt: quant.Q8_0, want: 8192 * (2*32*32*34 + 8)},
		{name: "Q8_0 width not a multiple of 32", nLayers: 5, kvDim: 48, cells: 16, dt: quant.Q8_0, wantErr: "multiple of 32"},
		{name: "largest cell count", nLayers: 1, kvDim: 1, cells: math.MaxInt32, dt: quant.F32, want: math.MaxInt32 * 16},
		{name: "zero cells", nLayers: 5, kvDim: 32, cells: 0, dt: quant.F16, wantErr: "must be positive"},
		{name: "negative cells", nLayers: 5, kvDim: 32, cells: -5, dt: quant.F16, wantErr: "must be positive"},
		{name: "beyond int32 cells", nLayers: 5, kvDim: 32, cells: math.MaxInt32 + 1, dt: quant.F16, wantErr: "int32 cell index"},
		{name: "max int cells", nLayers: 5, kvDim: 32, cells: math.MaxInt, dt: quant.F16, wantErr: "int32 cell index"},
		{name: "cell overflows", nLayers: 1 << 31, kvDim: 1 << 31, cells: 1, dt: quant.F32, wantErr: "overflows int64"},
		{name: "pool overflows", nLayers: 1 << 20, kvDim: 1 << 20, cells: 1 << 22, dt: quant.F16, wantErr: "overflow int64"},
		{name: "no layers", nLayers: 0, kvDim: 32, cells: 16, dt: quant.F16, wantErr: "NLayers"},
		{name: "no KV width", nLayers: 5, kvDim: -1, cells: 16, dt: quant.F16, wantErr: "KVDim"},
		{name: "unknown type", nLayers: 5, kvDim: 32, cells: 16, dt: quant.Type(7), wantErr: "unsupported DType"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PoolBytes(tc.nLayers, tc.kvDim, tc.cells, tc.dt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PoolBytes = %d, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PoolBytes = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
