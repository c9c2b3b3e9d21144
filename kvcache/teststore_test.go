package kvcache

import (
	"ubatch/batch"
	"ubatch/kvformat"
	"ubatch/quant"
)

// Cache is, for the tests, a Manager with K/V memory: a testStore that applies the manager's
// pending store operations before every access (kvstore.Store does the same for the runner;
// this package's tests cannot import it). Tests read and write K/V through KF32 etc., so every
// copy and shift the manager decides is checked on memory too.
type Cache struct {
	*Manager
	st   testStore
	ops  []batch.KVOp
	tier *testTier // a disk tier's stand-in, when enabled (random_tier_test.go)
}

// New makes a test cache; shiftK (nil: addShift) re-rotates keys.
func New(cfg Config) (*Cache, error) { return newWithShift(cfg, nil) }

func newWithShift(cfg Config, shiftK func(l int, k []float32, delta int32)) (*Cache, error) {
	m, err := NewManager(cfg)
	if err != nil {
		return nil, err
	}
	if shiftK == nil {
		shiftK = addShift
	}
	c := &Cache{Manager: m}
	c.st.init(m.Config(), shiftK)
	return c, nil
}

// sync applies the pending store operations.
func (c *Cache) sync() {
	c.ops = c.TakeOps(c.ops[:0])
	if c.tier != nil {
		c.tier.sync(c)
		return
	}
	c.st.apply(c.ops, nil)
}

func (c *Cache) KF32(l int) []float32 { c.sync(); return at(c.st.k32, l) }
func (c *Cache) VF32(l int) []float32 { c.sync(); return at(c.st.v32, l) }
func (c *Cache) KF16(l int) []uint16  { c.sync(); return at(c.st.k16, l) }
func (c *Cache) VF16(l int) []uint16  { c.sync(); return at(c.st.v16, l) }
func (c *Cache) KQ8(l int) []byte     { c.sync(); return at(c.st.k8, l) }
func (c *Cache) VQ8(l int) []byte     { c.sync(); return at(c.st.v8, l) }
func (c *Cache) RowBytes() int        { return c.st.rowBytes }

func at[T any](s [][]T, i int) []T {
	if i < 0 || i >= len(s) {
		return nil
	}
	return s[i]
}

// testStore is kvstore.Store's layout and operations, in brief.
type testStore struct {
	cfg      Config
	shift    func(l int, k []float32, delta int32)
	k32, v32 [][]float32
	k16, v16 [][]uint16
	k8, v8   [][]byte
	rowBytes int
	row      []float32
}

func (s *testStore) init(cfg Config, shift func(l int, k []float32, delta int32)) {
	s.cfg, s.shift, s.rowBytes, s.row = cfg, shift, int(kvformat.RowBytes(cfg.DType, cfg.KVDim)), make([]float32, cfg.KVDim)
	cells := cfg.NumBlocks * cfg.BlockSize
	for range cfg.NLayers {
		switch cfg.DType {
		case quant.F32:
			s.k32, s.v32 = append(s.k32, make([]float32, cells*cfg.KVDim)), append(s.v32, make([]float32, cells*cfg.KVDim))
		case quant.F16:
			s.k16, s.v16 = append(s.k16, make([]uint16, cells*cfg.KVDim)), append(s.v16, make([]uint16, cells*cfg.KVDim))
		case quant.Q8_0:
			s.k8, s.v8 = append(s.k8, make([]byte, cells*s.rowBytes)), append(s.v8, make([]byte, cells*s.rowBytes))
		}
	}
}

func (s *testStore) apply(ops []batch.KVOp, images [][]byte) {
	kv, rb := s.cfg.KVDim, s.rowBytes
	for _, o := range ops {
		if o.Kind == batch.KVLoad || o.Kind == batch.KVSave {
			s.image(o, images)
			continue
		}
		if o.Kind == batch.KVCopy {
			a, b, m := int(o.Src)*kv, int(o.Dst)*kv, int(o.N)*kv
			for l := range s.k32 {
				copy(s.k32[l][b:b+m], s.k32[l][a:a+m])
				copy(s.v32[l][b:b+m], s.v32[l][a:a+m])
			}
			for l := range s.k16 {
				copy(s.k16[l][b:b+m], s.k16[l][a:a+m])
				copy(s.v16[l][b:b+m], s.v16[l][a:a+m])
			}
			a, b, m = int(o.Src)*rb, int(o.Dst)*rb, int(o.N)*rb
			for l := range s.k8 {
				copy(s.k8[l][b:b+m], s.k8[l][a:a+m])
				copy(s.v8[l][b:b+m], s.v8[l][a:a+m])
			}
			continue
		}
		for l := range s.cfg.NLayers {
			for cell := int(o.Dst); cell < int(o.Dst+o.N); cell++ {
				switch s.cfg.DType {
				case quant.F32:
					s.shift(l, s.k32[l][cell*kv:(cell+1)*kv], o.Delta)
				case quant.F16:
					row := s.k16[l][cell*kv : (cell+1)*kv]
					quant.F16ToF32s(s.row, row)
					s.shift(l, s.row, o.Delta)
					quant.F32ToF16s(row, s.row)
				case quant.Q8_0:
					row := s.k8[l][cell*rb : (cell+1)*rb]
					if err := quant.Dequantize(quant.Q8_0, row, s.row); err != nil {
						panic(err)
					}
					s.shift(l, s.row, o.Delta)
					if err := quant.Quantize(quant.Q8_0, s.row, row); err != nil {
						panic(err)
					}
				}
			}
		}
	}
}
