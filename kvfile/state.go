package kvfile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"ubatch/kvcache"
)

// Recurrent states (version 3). A hybrid model's sequence memory is its attention layers' KV
// blocks and a recurrent state, valid only at the position it was taken. An image of such a
// model (a saved slot) holds, after its block records, State records: a snapshot of the state at
// a block boundary, named by the Key of the block ending there. Its layout has StateBytes > 0,
// which version 3's header states; every record then begins with its kind:
//
//	header:  as version 2, with state bytes u32 between the layers and the record count
//	record:  kind u32 (1 block, 2 state) | a block record as in version 2 (its checksum covers
//	         the kind too), or
//	         key [32]byte | position u32 (a multiple of block size, > 0) | data [state bytes]
//	         | crc32c u32 of the record's bytes before it, kind included
//
// Blocks come first, then states, in increasing position and no more of them than blocks. A
// layout without states writes version 2, byte for byte as before; versions 1 and 2 are still
// read (without states, so a hybrid's layout finds them foreign), and a build that reads only up
// to version 2 finds a version 3 file foreign.

// VersionStates is the version of an image whose layout has states.
const VersionStates = 3

// MaxStateBytes bounds the state size a header may claim (1 GiB).
const MaxStateBytes = 1 << 30

// Record kinds of version 3.
const (
	kindBlock uint32 = 1
	kindState uint32 = 2
)

// State is a snapshot of a hybrid model's recurrent state at Pos, a block boundary: the state
// after the tokens of the block chain ending with Key. Data is the runner's state image
// (StateBytes of the layout).
type State struct {
	Key  kvcache.Key
	Pos  int32
	Data []byte
}

func (s *State) check(l Layout) error {
	switch {
	case l.StateBytes == 0:
		return fmt.Errorf("%w: a recurrent state in a layout without states", ErrCorrupt)
	case len(s.Data) != l.StateBytes:
		return fmt.Errorf("%w: a state of %d bytes, the layout's are %d", ErrCorrupt, len(s.Data), l.StateBytes)
	case s.Pos <= 0 || s.Pos%int32(l.BlockSize) != 0:
		return fmt.Errorf("%w: a state at position %d, not a boundary of blocks of %d", ErrCorrupt, s.Pos, l.BlockSize)
	}
	return nil
}

// version is the format version a layout is written in.
func (l Layout) version() uint32 {
	if l.StateBytes > 0 {
		return VersionStates
	}
	return Version
}

// kindBytes is the size of a record's kind: 4 in version 3, none before.
func (l Layout) kindBytes() int {
	if l.StateBytes > 0 {
		return 4
	}
	return 0
}

// appendKind appends a record's kind to b in version 3, nothing before.
func (l Layout) appendKind(b []byte, kind uint32) []byte {
	if l.StateBytes == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint32(b, kind)
}

// readKind reads a record's kind (version 3), or says kindBlock before.
func (l Layout) readKind(r io.Reader) (uint32, error) {
	if l.StateBytes == 0 {
		return kindBlock, nil
	}
	var k [4]byte
	if _, err := io.ReadFull(r, k[:]); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch kind := binary.LittleEndian.Uint32(k[:]); kind {
	case kindBlock, kindState:
		return kind, nil
	default:
		return 0, fmt.Errorf("%w: record kind %d", ErrCorrupt, kind)
	}
}

// stateSize is the encoded size of one State record under l.
func stateSize(l Layout) int64 { return 4 + 32 + 4 + int64(l.StateBytes) + 4 }

// SizeImage returns the encoded size of blocks and states under l.
func SizeImage(l Layout, blocks []Block, states []State) int64 {
	return Size(l, blocks) + int64(len(states))*stateSize(l)
}

func encodeStates(w io.Writer, states []State) error {
	var head []byte
	for i := range states {
		st := &states[i]
		head = binary.LittleEndian.AppendUint32(head[:0], kindState)
		head = append(head, st.Key[:]...)
		head = binary.LittleEndian.AppendUint32(head, uint32(st.Pos))
		crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, st.Data)
		if _, err := w.Write(head); err != nil {
			return err
		}
		if _, err := w.Write(st.Data); err != nil {
			return err
		}
		if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc)); err != nil {
			return err
		}
	}
	return nil
}

// decodeState reads a State record after its kind.
func decodeState(r io.Reader, l Layout) (State, error) {
	var st State
	body := make([]byte, 32+4+l.StateBytes+4)
	if _, err := io.ReadFull(r, body); err != nil {
		return st, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	kind := binary.LittleEndian.AppendUint32(nil, kindState)
	n := len(body) - 4
	if crc32.Update(crc32.Checksum(kind, castagnoli), castagnoli, body[:n]) != binary.LittleEndian.Uint32(body[n:]) {
		return st, fmt.Errorf("%w: state record checksum", ErrCorrupt)
	}
	copy(st.Key[:], body[:32])
	st.Pos = int32(binary.LittleEndian.Uint32(body[32:]))
	st.Data = body[36:n:n]
	return st, st.check(l)
}
