package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"ubatch/engine"
	"ubatch/kvdisk"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/runner"
)

// kvDiskFlags are serve's flags for the KV cache's tiers on disk: the disk tier (--kv-disk) and
// llama-server's slot save and restore (--slot-save-path), both in package kvfile's format.
type kvDiskFlags struct {
	dir, size, slotPath string
}

func (f *kvDiskFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.dir, "kv-disk", "", "keep the KV cache's cold prefix blocks in this directory: blocks the RAM prefix cache evicts are written there (in the cache's own type, by a writer that never holds a step back) and read back on a prefix hit instead of recomputed; preempted sequences are swapped out there when reading them back is cheaper than recomputing; the directory survives restarts (torn files are removed, other models' ignored)")
	fs.StringVar(&f.size, "kv-disk-size", "", "most bytes --kv-disk may take, e.g. 20G (default: a quarter of the file system's free space at start, at most 16G: room for the cache without crowding models and logs off the disk)")
	fs.StringVar(&f.slotPath, "slot-save-path", "", "directory of POST /slots/{id}?action=save|restore files (llama-server's; without it those actions are 501)")
}

// maxDefaultDisk caps the default --kv-disk-size: 16 GiB holds some 130,000 tokens of an 8B
// model's F16 KV (128 KiB a token), far more prefixes than one node's traffic reuses.
const maxDefaultDisk = 16 << 30

// defaultDiskSize is a quarter of the free space of the file system holding dir, at most
// maxDefaultDisk.
func defaultDiskSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("--kv-disk %s: %w", dir, err)
	}
	return min(int64(st.Bavail)*int64(st.Bsize)/4, maxDefaultDisk), nil
}

// kvLayout is the kvfile layout of lctx's KV cache for model m.
func kvLayout(m *model.Model, lctx *runner.Runtime) (kvfile.Layout, error) {
	id, err := kvfile.ModelIdentity(m.Path, m.File.DataOffset)
	if err != nil {
		return kvfile.Layout{}, fmt.Errorf("the model file's identity for --kv-disk: %w", err)
	}
	h, cfg := lctx.Hparams(), lctx.KVConfig()
	// The KV cache's layers (a hybrid's attention layers alone, each at its own shape), and a
	// hybrid's state size.
	l := kvfile.Layout{Model: id, DType: cfg.DType, BlockSize: cfg.BlockSize, StateBytes: lctx.StateBytes()}
	for i := range h.NKVLayers() {
		a := h.Shape(i)
		l.Layers = append(l.Layers, kvfile.Layer{KVHeads: a.NKVHeads, HeadDim: a.HeadDim})
	}
	return l, l.Check()
}

// start opens the disk tier and gives the engine its tiers: the disk first, then the peer tier
// that peers makes for the layout (nil: none; see fleetFlags.peerTier); without any it does
// nothing. It returns the disk tier (nil without --kv-disk), the layout and a close function.
func (f *kvDiskFlags) start(m *model.Model, lctx *runner.Runtime, eng *engine.Engine, log *slog.Logger,
	peers func(kvfile.Layout) (engine.BlockSource, error)) (*kvdisk.Tier, kvfile.Layout, func(), error) {
	nop := func() {}
	if f.dir == "" && f.slotPath == "" && peers == nil {
		return nil, kvfile.Layout{}, nop, nil
	}
	if eng.Recurrent() && (f.dir != "" || peers != nil) { // slot files carry its state; these do not
		var flags []string
		if f.dir != "" {
			flags = append(flags, "--kv-disk")
		}
		if peers != nil {
			flags = append(flags, "--peer-kv (with --redis)")
		}
		return nil, kvfile.Layout{}, nop, fmt.Errorf("%s: %w", strings.Join(flags, ", "), engine.ErrRecurrentTiers)
	}
	l, err := kvLayout(m, lctx)
	if err != nil {
		return nil, l, nop, err
	}
	if f.slotPath != "" {
		if err := os.MkdirAll(f.slotPath, 0o755); err != nil {
			return nil, l, nop, fmt.Errorf("--slot-save-path: %w", err)
		}
	}
	var tier *kvdisk.Tier
	var sources []engine.BlockSource
	var sink engine.BlockSink
	if f.dir != "" {
		var size int64
		if f.size != "" {
			if size, err = parseSize(f.size); err != nil || size <= 0 {
				return nil, l, nop, fmt.Errorf("--kv-disk-size %q: give a positive size such as 20G or 512M", f.size)
			}
		} else {
			if err := os.MkdirAll(f.dir, 0o755); err != nil {
				return nil, l, nop, fmt.Errorf("--kv-disk: %w", err)
			}
			if size, err = defaultDiskSize(f.dir); err != nil {
				return nil, l, nop, err
			}
		}
		if tier, err = kvdisk.Open(f.dir, l, max(size, 1), log); err != nil {
			return nil, l, nop, err
		}
		sources, sink = []engine.BlockSource{tier}, tier
		st := tier.Stats()
		log.Info("kv disk tier", "dir", f.dir, "max_bytes", size, "blocks", st.Blocks, "bytes", st.Bytes, "rejected", st.Rejected)
	}
	if peers != nil {
		p, err := peers(l)
		if err != nil {
			if tier != nil {
				tier.Close()
			}
			return nil, l, nop, err
		}
		sources = append(sources, p)
	}
	if !eng.SetTiers(sources, sink, l) {
		if tier != nil {
			tier.Close()
		}
		return nil, l, nop, fmt.Errorf("the engine's KV manager cannot have tiers")
	}
	closeFn := nop
	if tier != nil {
		closeFn = tier.Close
	}
	return tier, l, closeFn, nil
}
