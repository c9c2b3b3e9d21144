package kvfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// MaxName is the longest file name WriteFile can write: a file system's usual NAME_MAX (255
// bytes) less what its temporary name adds (a leading dot, a dot and up to ten random digits,
// ".tmp"). A longer name fails to be created, whatever the directory.
const MaxName = 255 - len(".") - len(".") - 10 - len(".tmp")

// WriteFile writes blocks under l to path atomically: to a temporary file in the same
// directory, then renamed over path, so a reader sees the old file, the whole new one, or none
// (a crash may leave a "*.tmp" file behind, never a torn path). Not synced to disk: a power cut
// may lose or tear the file, which the checksums then reject. path's base name must be at most
// MaxName bytes.
func WriteFile(path string, l Layout, blocks []Block) (int64, error) {
	return WriteImageFile(path, l, blocks, nil)
}

// WriteImageFile is WriteFile of an image with states (EncodeImage).
func WriteImageFile(path string, l Layout, blocks []Block, states []State) (int64, error) {
	dir, base := filepath.Split(path)
	if len(base) > MaxName {
		return 0, fmt.Errorf("kvfile: file name of %d bytes, at most %d fit with the temporary suffix", len(base), MaxName)
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 1<<16)
	err = EncodeImage(w, l, blocks, states)
	if err == nil {
		err = w.Flush()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return size, nil
}

// ErrNotRegular: the path names something other than a regular file (a FIFO, a device, a
// directory, a socket), which ReadFile does not open.
var ErrNotRegular = errors.New("kvfile: not a regular file")

// OpenRegular opens path for reading if it is a regular file: the open does not block
// (O_NONBLOCK, so a FIFO without a writer cannot hang it) and anything else is ErrNotRegular,
// checked on the opened file itself (no race with a rename). It returns the file and its
// information; the caller closes the file.
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is a %v", ErrNotRegular, filepath.Base(path), fi.Mode().Type())
	}
	return f, fi, nil
}

// ReadFile decodes the image at path (see Decode), a regular file only (OpenRegular). Reading
// stops with ctx's error when ctx ends.
func ReadFile(ctx context.Context, path string, want Layout, maxBlocks int) ([]Block, error) {
	blocks, states, err := ReadImageFile(ctx, path, want, maxBlocks)
	if err == nil && len(states) > 0 {
		return nil, fmt.Errorf("%w: the image holds %d recurrent states besides its blocks", ErrForeign, len(states))
	}
	return blocks, err
}

// ReadImageFile is ReadFile of an image that may hold states (DecodeImage).
func ReadImageFile(ctx context.Context, path string, want Layout, maxBlocks int) ([]Block, []State, error) {
	f, _, err := OpenRegular(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	blocks, states, err := DecodeImage(ctxReader{ctx, f}, want, maxBlocks)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return nil, nil, cerr // Decode words a failed read as corruption
	}
	return blocks, states, err
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
