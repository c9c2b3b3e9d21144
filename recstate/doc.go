// Package recstate is the bookkeeping of hybrid models' recurrent states (Qwen 3.5, Qwen3-Next):
// what to do with each sequence's state and with snapshots of it, as plain data beside
// kvcache's blocks, which hold the few full-attention layers' K and V. It holds no state bytes:
// the runner keeps one live state per sequence id and one buffer per snapshot slot, and applies
// the ordered operations (Op) the Manager decides, as kvstore applies kvcache's.
//
// # States
//
// A sequence's state (conv and delta-net state of every linear-attention layer) is overwritten
// by every token and summarizes the whole history: it is valid only at the position it was taken
// (Pos, the tokens consumed), cannot be cut back, and cannot be shifted (ErrContextShift). Copy
// is seq_cp of a whole sequence. Remove to the end of the history cuts back by restoring the
// nearest snapshot at or before the new end and says how many tokens to decode again (Cut);
// a range ending inside the history is ErrHole.
//
// # Snapshots
//
// A snapshot is a copy of a state at a block boundary (a multiple of kvcache's BlockSize),
// named by the kvcache Key of the block ending there: SHA-256 chained from the sequence's salt,
// the same name the disk tier gives that block, so nothing of one salt matches another's. A
// snapshot is taken only by a step that ends exactly at its boundary (OpSave after that step);
// ChunkEnd tells the scheduler where a prompt chunk must end for that. The Policy says which
// boundaries keep one: every Every-th block, the prompt's branch point and last full block, and
// a sequence's latest boundary (its tail). Slots are Budget/StateBytes; a sequence holds a
// reference to its latest snapshot (its anchor, where a cut back or a failed step restarts);
// unreferenced snapshots are evicted least recently used first (one used by another sequence gets
// second chances), a superseded tail at once.
//
// # Prefix hits
//
// A hybrid prefix hit is the longest boundary where both the attention blocks and a snapshot
// exist: Match over kvcache's match, CanAdmit and Admit over kvcache's CanAdmit and Admit.
//
// # Concurrency
//
// A Manager is not safe for concurrent use: the engine goroutine owns it, beside kvcache's.
package recstate
