package peer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"ubatch/kvfile"
	"ubatch/prefixhash"
)

// Default bounds of one POST /kv/blocks request.
const (
	DefaultMaxBlocks = 1024 // 16k tokens at the default block size
	// DefaultMaxBytes bounds the K/V of one answer: the serving node copies the blocks out of
	// its store on its engine goroutine, between two steps, so this bounds the pause a peer's
	// request adds to the node's own streams (some 10 ms of memory copy); a fetcher asks for
	// more in several requests.
	DefaultMaxBytes = 64 << 20
)

// HandlerConfig configures Handler. Cache and Layout are required.
type HandlerConfig struct {
	Cache  Exporter
	Layout kvfile.Layout // the node's KV layout (model identity, type, block size, layers)
	// MaxBlocks bounds the blocks one request may ask for (400 beyond it), MaxBytes the K/V one
	// answer carries (fewer blocks are sent when the rest would pass it); 0 = the defaults.
	MaxBlocks int
	MaxBytes  int64
	Metrics   *Metrics // nil: not counted
	Logger    *slog.Logger
}

// Handler serves POST /kv/blocks (see wire.go for the format) from the node's cache. It checks
// no API key itself: mount it behind the server's (server.Config.KVBlocks).
func Handler(cfg HandlerConfig) http.Handler {
	if cfg.MaxBlocks <= 0 {
		cfg.MaxBlocks = DefaultMaxBlocks
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ident := Identity(cfg.Layout)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, blocks, bytes := serveBlocks(cfg, ident, w, r)
		cfg.Metrics.served(code, blocks, bytes)
	})
}

// serveBlocks answers one request and returns its status and what it sent.
func serveBlocks(cfg HandlerConfig, ident string, w http.ResponseWriter, r *http.Request) (int, int, int64) {
	bs := cfg.Layout.BlockSize
	blockBytes := int64(bs) * cfg.Layout.CellBytes()
	// A request is its tokens (up to ~12 JSON bytes each) and hashes (~19 each).
	limit := int64(cfg.MaxBlocks)*(int64(bs)*12+20) + 4096
	var req blocksRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fail(w, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("request body over %d bytes: ask for at most %d blocks", limit, cfg.MaxBlocks))
		}
		return fail(w, http.StatusBadRequest, "invalid_json", "body: "+err.Error())
	}
	switch {
	case req.KVIdentity != ident || req.BlockSize != bs:
		return fail(w, http.StatusConflict, "kv_identity_mismatch", fmt.Sprintf(
			"kv_identity %q and block_size %d: this node has %q and %d", req.KVIdentity, req.BlockSize, ident, bs))
	case len(req.Hashes) == 0:
		return fail(w, http.StatusBadRequest, "invalid_hashes", "hashes: empty")
	case len(req.Hashes) > cfg.MaxBlocks:
		return fail(w, http.StatusBadRequest, "invalid_hashes", fmt.Sprintf("hashes: %d, at most %d per request", len(req.Hashes), cfg.MaxBlocks))
	case req.From < 0 || req.From >= len(req.Hashes):
		return fail(w, http.StatusBadRequest, "invalid_from", fmt.Sprintf("from: %d, want a block index in [0, %d)", req.From, len(req.Hashes)))
	case len(req.Tokens) != len(req.Hashes)*bs:
		return fail(w, http.StatusBadRequest, "invalid_tokens", fmt.Sprintf("tokens: %d, want block_size × hashes = %d", len(req.Tokens), len(req.Hashes)*bs))
	}
	salt, err := req.salt()
	if err != nil {
		return fail(w, http.StatusBadRequest, "invalid_salt", err.Error())
	}
	chain := prefixhash.ChainFrom(make([]uint64, 0, len(req.Hashes)), salt.Routing, req.Tokens, bs)
	for i, s := range req.Hashes {
		h, err := strconv.ParseUint(s, 16, 64)
		if err != nil || len(s) != 16 {
			return fail(w, http.StatusBadRequest, "invalid_hashes", fmt.Sprintf("hashes[%d] %q: want 16 hex digits", i, s))
		}
		if h != chain[i] {
			return fail(w, http.StatusBadRequest, "invalid_hashes", fmt.Sprintf("hashes[%d] is not the routing hash of its tokens", i))
		}
	}
	n := int(min(int64(len(req.Hashes)), int64(req.From)+cfg.MaxBytes/max(blockBytes, 1)))
	if n == req.From {
		return fail(w, http.StatusRequestEntityTooLarge, "block_too_large", "one block is larger than the node's limit of one answer")
	}
	blocks, err := cfg.Cache.ExportBlocks(r.Context(), salt, req.Tokens[:n*bs], n)
	if err != nil {
		if r.Context().Err() != nil {
			return 499, 0, 0 // the client went away: nothing to answer
		}
		cfg.Logger.Warn("exporting KV blocks to a peer failed", "err", err)
		return fail(w, http.StatusServiceUnavailable, "export_failed", "the node could not export its blocks: "+err.Error())
	}
	if len(blocks) <= req.From {
		return fail(w, http.StatusNotFound, "blocks_not_found", "this node holds none of the blocks (evicted since it published them)")
	}
	blocks = blocks[req.From:]
	size := kvfile.Size(cfg.Layout, blocks)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := kvfile.Encode(bw, cfg.Layout, blocks); err != nil {
		cfg.Logger.Warn("sending KV blocks to a peer failed", "err", err)
		return 499, 0, 0
	}
	if bw.Flush() != nil {
		return 499, 0, 0
	}
	return http.StatusOK, len(blocks), size
}

// fail writes an error in the server's JSON shape.
func fail(w http.ResponseWriter, status int, code, msg string) (int, int, int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "type": "invalid_request_error"}})
	return status, 0, 0
}
