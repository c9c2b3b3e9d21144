package kvfile

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// stateLayout is testLayout with recurrent states of 24 bytes.
func stateLayout() Layout {
	l := testLayout()
	l.StateBytes = 24
	return l
}

// testStates makes a snapshot for each full block of blocks: at its end, named by its key.
func testStates(l Layout, blocks []Block, rng *rand.Rand) []State {
	var out []State
	for _, b := range blocks {
		if len(b.Tokens) < l.BlockSize {
			continue
		}
		data := make([]byte, l.StateBytes)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		out = append(out, State{Key: b.Key, Pos: (b.Depth + 1) * int32(l.BlockSize), Data: data})
	}
	return out
}

func equalStates(a, b []State) bool {
	return slices.EqualFunc(a, b, func(x, y State) bool { return x.Key == y.Key && x.Pos == y.Pos && bytes.Equal(x.Data, y.Data) })
}

// TestStates: an image of a layout with recurrent states is version 3, its blocks and states
// read back as written; its blocks alone, or a layout without states (version 2 as before),
// read back too. A state image is foreign to Decode (blocks only) and to a layout without
// states; a flipped byte anywhere, a record of unknown kind and a state that does not fit are
// refused.
func TestStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	l := stateLayout()
	blocks := testBlocks(l, 3, 1, rng)
	states := testStates(l, blocks, rng)
	image := func(t *testing.T, l Layout, blocks []Block, states []State) []byte {
		t.Helper()
		var buf bytes.Buffer
		if err := EncodeImage(&buf, l, blocks, states); err != nil {
			t.Fatal(err)
		}
		if int64(buf.Len()) != SizeImage(l, blocks, states) {
			t.Fatalf("%d bytes, SizeImage says %d", buf.Len(), SizeImage(l, blocks, states))
		}
		return buf.Bytes()
	}
	full := image(t, l, blocks, states)
	if v := full[4]; v != VersionStates {
		t.Fatalf("version %d, want %d", v, VersionStates)
	}
	plain := testLayout()
	if !bytes.Equal(image(t, plain, blocks, nil), encode(t, plain, blocks)) {
		t.Fatal("a layout without states is not written as version 2 was")
	}
	tests := []struct {
		name   string
		data   []byte
		want   Layout
		blocks []Block
		states []State
		err    error
	}{
		{name: "blocks and states", data: full, want: l, blocks: blocks, states: states},
		{name: "blocks of a state layout", data: image(t, l, blocks, nil), want: l, blocks: blocks},
		{name: "version 2", data: encode(t, plain, blocks), want: plain, blocks: blocks},
		{name: "version 2 for a state layout", data: encode(t, plain, blocks), want: l, err: ErrForeign},
		{name: "version 3 for a plain layout", data: full, want: plain, err: ErrForeign},
		{name: "flipped state byte", data: flip(full, len(full)-10), want: l, err: ErrCorrupt},
		{name: "flipped kind", data: flip(full, len(full)-int(stateSize(l))), want: l, err: ErrCorrupt},
		{name: "truncated", data: full[:len(full)-1], want: l, err: ErrCorrupt},
		// Hostile but well-formed records: states out of order, and more states than blocks
		// (refused before the extra state's bytes are read).
		{name: "states out of order", data: image(t, l, blocks, []State{states[1], states[0]}), want: l, err: ErrCorrupt},
		{name: "more states than blocks", data: image(t, l, blocks[:1], states[:2]), want: l, err: ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotB, gotS, err := DecodeImage(bytes.NewReader(tc.data), tc.want, 0)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("DecodeImage = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || !equalBlocks(gotB, tc.blocks) || !equalStates(gotS, tc.states) {
				t.Fatalf("DecodeImage = %d blocks, %d states, %v; want %d and %d", len(gotB), len(gotS), err, len(tc.blocks), len(tc.states))
			}
		})
	}
	if _, err := Decode(bytes.NewReader(full), l, 0); !errors.Is(err, ErrForeign) {
		t.Errorf("Decode of an image with states = %v, want ErrForeign", err)
	}
	bad := []struct {
		name   string
		l      Layout
		states []State
	}{
		{name: "state in a plain layout", l: plain, states: states[:1]},
		{name: "short state", l: l, states: []State{{Key: states[0].Key, Pos: 4, Data: states[0].Data[:8]}}},
		{name: "state off a boundary", l: l, states: []State{{Key: states[0].Key, Pos: 5, Data: states[0].Data}}},
	}
	for _, tc := range bad {
		if err := EncodeImage(&bytes.Buffer{}, tc.l, blocks, tc.states); err == nil {
			t.Errorf("%s: EncodeImage accepted it", tc.name)
		}
	}
}

// flip returns data with byte i inverted.
func flip(data []byte, i int) []byte {
	out := slices.Clone(data)
	out[i] ^= 0xff
	return out
}
