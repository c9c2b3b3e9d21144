package llamacpp

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"ubatch/engine"
	"ubatch/kvfile"
	"ubatch/server"
)

// llama-server's slot save and restore: POST /slots/{id}?action=save|restore|erase with
// {"filename": "..."} (save and restore), files in --slot-save-path in package kvfile's format
// (the disk tier's), answered as llama-server answers. Without --slot-save-path every action is
// 501, as there.

type slotFileRequest struct {
	Filename string `json:"filename"`
}

type slotSaveTimings struct {
	SaveMS    float64 `json:"save_ms,omitempty"`
	RestoreMS float64 `json:"restore_ms,omitempty"`
}

type slotSaveReply struct {
	IDSlot   int             `json:"id_slot"`
	Filename string          `json:"filename"`
	NSaved   int             `json:"n_saved"`
	NWritten int64           `json:"n_written"`
	Timings  slotSaveTimings `json:"timings"`
}

type slotRestoreReply struct {
	IDSlot    int             `json:"id_slot"`
	Filename  string          `json:"filename"`
	NRestored int             `json:"n_restored"`
	NRead     int64           `json:"n_read"`
	Timings   slotSaveTimings `json:"timings"`
}

type slotEraseReply struct {
	IDSlot  int `json:"id_slot"`
	NErased int `json:"n_erased"`
}

// maxSlotFilename bounds a slot file's name: what fits in a file system's usual NAME_MAX with
// the suffix of the temporary file a save writes first.
const maxSlotFilename = kvfile.MaxName

// checkSlotFilename refuses names that are not one plain file name in the directory.
func checkSlotFilename(name string) error {
	switch {
	case name == "":
		return server.BadRequest("filename", "filename is required: the name of a file in --slot-save-path")
	case len(name) > maxSlotFilename:
		return server.BadRequest("filename", "filename is %d bytes long: use at most %d (a save first writes a temporary file whose name adds to it)", len(name), maxSlotFilename)
	case !utf8.ValidString(name) || strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." ||
		strings.HasPrefix(name, ".") || filepath.Base(name) != name:
		return server.BadRequest("filename", "invalid filename %s: a plain file name, no path separators, not starting with a dot", server.Echo(name))
	}
	return nil
}

func (s *api) handleSlotAction(w http.ResponseWriter, r *http.Request) {
	if s.Config().SlotSavePath == "" {
		server.WriteError(w, &server.APIError{Status: http.StatusNotImplemented, Type: "not_supported_error",
			Message: "this server does not support slot actions: start it with --slot-save-path DIR"})
		return
	}
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 0 || id >= s.Config().Engine.Config().MaxRunning {
		server.WriteError(w, server.BadRequest("id_slot", "invalid slot id %s: use 0 to %d", server.Echo(r.PathValue("id")), s.Config().Engine.Config().MaxRunning-1))
		return
	}
	action := r.URL.Query().Get("action")
	var req slotFileRequest
	if action == "save" || action == "restore" {
		if err := server.DecodeBody(w, r, s.Config().MaxBodyBytes, &req); err != nil {
			server.WriteError(w, err)
			return
		}
		if err := checkSlotFilename(req.Filename); err != nil {
			server.WriteError(w, err)
			return
		}
	}
	path := filepath.Join(s.Config().SlotSavePath, req.Filename)
	start := time.Now()
	switch action {
	case "save":
		blocks, states, _, err := s.Config().Engine.SaveSlotImage(r.Context(), id)
		if err != nil {
			server.WriteError(w, slotError(err))
			return
		}
		n := 0
		for _, b := range blocks {
			n += len(b.Tokens)
		}
		size, err := kvfile.WriteImageFile(path, s.Config().KVLayout, blocks, states)
		if err != nil {
			server.WriteError(w, server.InternalError(err))
			return
		}
		server.WriteJSON(w, http.StatusOK, slotSaveReply{IDSlot: id, Filename: req.Filename, NSaved: n, NWritten: size,
			Timings: slotSaveTimings{SaveMS: server.Millis(time.Since(start))}})
	case "restore":
		bs := s.Config().KVLayout.BlockSize
		// A hybrid's file holds a state after its blocks: room for one per block.
		blocks, states, err := kvfile.ReadImageFile(r.Context(), path, s.Config().KVLayout, 2*(s.Config().Engine.Limits().NCtxSeq/bs+1))
		if err != nil {
			server.WriteError(w, slotFileError(req.Filename, err))
			return
		}
		var size int64 = kvfile.SizeImage(s.Config().KVLayout, blocks, states)
		n, err := s.Config().Engine.RestoreSlotImage(r.Context(), id, blocks, states)
		if errors.Is(err, engine.ErrSlotFile) {
			err = server.BadRequest("filename", "%s is not a saved slot: %v", req.Filename, err)
		}
		if err != nil {
			server.WriteError(w, slotError(err))
			return
		}
		server.WriteJSON(w, http.StatusOK, slotRestoreReply{IDSlot: id, Filename: req.Filename, NRestored: n, NRead: size,
			Timings: slotSaveTimings{RestoreMS: server.Millis(time.Since(start))}})
	case "erase":
		n, err := s.Config().Engine.EraseSlot(r.Context(), id)
		if err != nil {
			server.WriteError(w, slotError(err))
			return
		}
		server.WriteJSON(w, http.StatusOK, slotEraseReply{IDSlot: id, NErased: n})
	default:
		server.WriteError(w, server.BadRequest("action", "invalid action %s: use save, restore or erase", server.Echo(action)))
	}
}

func slotError(err error) error {
	switch {
	case errors.Is(err, engine.ErrSlot), errors.Is(err, engine.ErrSlotSalted):
		return server.BadRequest("id_slot", "%v", err)
	case errors.Is(err, engine.ErrNoTiers):
		return &server.APIError{Status: http.StatusNotImplemented, Type: "not_supported_error", Message: err.Error()}
	}
	return server.ToAPIError(err)
}

// slotFileError words a restore's file error: a missing file is 404; one of another model or
// layout, a corrupt one or one that is not a regular file (a FIFO, a directory) 400 naming
// filename.
func slotFileError(name string, err error) error {
	switch {
	case errors.Is(err, kvfile.ErrForeign):
		return server.BadRequest("filename", "%s holds the KV cache of another model or cache layout: %v", name, err)
	case errors.Is(err, kvfile.ErrCorrupt):
		return server.BadRequest("filename", "%s is not an intact slot file: %v", name, err)
	case errors.Is(err, kvfile.ErrNotRegular):
		return server.BadRequest("filename", "%s is not a regular file: only slot files written by save are restored", name)
	case errors.Is(err, os.ErrNotExist):
		return server.NotFound("slot file " + strconv.Quote(name) + " not found in --slot-save-path")
	}
	return server.InternalError(err)
}
