package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/runner"
)

// kvLayout is the kvfile layout of lctx's KV cache for model m: what a block image of this node
// belongs to (peers and the disk tier check it).
func kvLayout(m *model.Model, lctx *runner.Context) (kvfile.Layout, error) {
	id, err := kvfile.ModelIdentity(m.Path, m.File.DataOffset)
	if err != nil {
		return kvfile.Layout{}, fmt.Errorf("the model file's identity for its KV blocks: %w", err)
	}
	h, cfg := lctx.Hparams(), lctx.KVConfig()
	l := kvfile.Layout{Model: id, DType: cfg.DType, BlockSize: cfg.BlockSize}
	for range h.NLayers {
		l.Layers = append(l.Layers, kvfile.Layer{KVHeads: h.NKVHeads, HeadDim: h.HeadDim})
	}
	return l, l.Check()
}

// startTiers gives the engine its KV tiers beyond RAM: the peer tier with --redis (and
// --peer-kv). Without any, the engine has none.
func startTiers(ff *fleetFlags, m *model.Model, lctx *runner.Context, eng *engine.Engine, apiKey string,
	reg prometheus.Registerer, logger *slog.Logger) error {
	if ff.redis == "" || !ff.peerKV {
		return nil
	}
	l, err := kvLayout(m, lctx)
	if err != nil {
		return err
	}
	src, err := ff.peerTier(l, apiKey, reg, logger)
	if err != nil {
		return err
	}
	if !eng.SetTiers([]engine.BlockSource{src}, nil, l) {
		return fmt.Errorf("the engine's KV manager cannot have tiers")
	}
	return nil
}
