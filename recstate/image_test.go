package recstate

import (
	"testing"

	"ubatch/kvcache"
)

// TestImport: a snapshot imported under the Key of a prompt's block is what Match then finds
// for that prompt, Find names its slot, a second import of it is not fresh, and a position that
// is no boundary, or one other than the snapshot's, is an error; a pool with no slots takes none.
func TestImport(t *testing.T) {
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	keys := kvcache.ChainKeysFrom(nil, kvcache.RootKey, prompt, 4) // blocks ending at 4 and 8
	m, err := New(Config{MaxSeqs: 2, BlockSize: 4, StateBytes: 8, Budget: 16, Policy: DefaultPolicy})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		key       kvcache.Key
		pos       int
		fresh, ok bool
		wantErr   bool
		match     int // Match of prompt after it
	}{
		{name: "block 2", key: keys[1], pos: 8, fresh: true, ok: true, match: 8},
		{name: "again", key: keys[1], pos: 8, ok: true, match: 8},
		{name: "another position", key: keys[1], pos: 4, wantErr: true, match: 8},
		{name: "not a boundary", key: keys[0], pos: 3, wantErr: true, match: 8},
		{name: "block 1", key: keys[0], pos: 4, fresh: true, ok: true, match: 8},
	}
	for _, tc := range tests {
		slot, fresh, ok, err := m.Import(tc.key, tc.pos)
		if (err != nil) != tc.wantErr || fresh != tc.fresh || ok != tc.ok {
			t.Errorf("%s: Import = slot %d, fresh %v, ok %v, %v; want fresh %v, ok %v, error %v", tc.name, slot, fresh, ok, err, tc.fresh, tc.ok, tc.wantErr)
		}
		if ok {
			if s, p, found := m.Find(tc.key); !found || s != slot || p != tc.pos {
				t.Errorf("%s: Find = %d, %d, %v; want slot %d at %d", tc.name, s, p, found, slot, tc.pos)
			}
		}
		if got := m.Match(kvcache.Salt{}, prompt, len(prompt)-1); got != tc.match {
			t.Errorf("%s: Match = %d, want %d", tc.name, got, tc.match)
		}
	}
	slot, _, _ := m.Find(keys[1])
	m.Discard(slot)
	if _, _, found := m.Find(keys[1]); found || m.Match(kvcache.Salt{}, prompt, len(prompt)-1) != 4 {
		t.Errorf("a discarded snapshot is still found")
	}
	if again, fresh, ok, _ := m.Import(keys[1], 8); !ok || !fresh || again != slot {
		t.Errorf("after Discard, Import = slot %d fresh %v ok %v; want the freed slot %d", again, fresh, ok, slot)
	}
	none, err := New(Config{MaxSeqs: 1, BlockSize: 4, StateBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := none.Import(keys[0], 4); ok || err != nil {
		t.Errorf("a pool without slots: Import ok %v, %v", ok, err)
	}
}
