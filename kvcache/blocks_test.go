package kvcache

import (
	"errors"
	"testing"
)

// TestCanAlloc: the check that goes with alloc counts free and cached blocks, fails with
// ErrKVFull past them, and alloc takes exactly what it allowed.
func TestCanAlloc(t *testing.T) {
	for _, tc := range []struct {
		name   string
		used   int // blocks held by sequence 0 first
		need   int
		wantOK bool
	}{
		{name: "an empty cache, every block", need: 4, wantOK: true},
		{name: "an empty cache, one too many", need: 5},
		{name: "three held, the last one", used: 3, need: 1, wantOK: true},
		{name: "three held, two", used: 3, need: 2},
		{name: "nothing needed", used: 4, need: 0, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 4})
			if tc.used > 0 {
				reserve(t, c, []int32{0}, 0, 1, seqRange(int32(4*tc.used))...)
			}
			err := c.canAlloc(tc.need)
			if ok := err == nil; ok != tc.wantOK || (!ok && !errors.Is(err, ErrKVFull)) {
				t.Fatalf("canAlloc(%d) with %d held: %v, want ok %v", tc.need, tc.used, err, tc.wantOK)
			}
			if !tc.wantOK {
				return
			}
			for range tc.need {
				c.hold(c.alloc(), 1)
			}
			if st := c.Stats(); st.Used != tc.used+tc.need || c.canAlloc(1) == nil != (st.Free+st.Cached > 0) {
				t.Errorf("after %d allocations: %+v", tc.need, st)
			}
		})
	}
}
