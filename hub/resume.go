package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A library pull writes into dest + ".part" and keeps that file when the transfer is cut (a
// dropped connection, Ctrl-C, an idle timeout), so the next pull of the same file asks only for
// the rest with an HTTP Range. Content that is wrong (not a GGUF, longer than announced, a
// checksum that differs) deletes it: resuming would only extend a bad file. The part file is
// locked while a pull writes it, so two pulls of one file cannot interleave.

// errCut marks a transfer that ended early with its part file kept for a resume.
var errCut = errors.New("download interrupted")

// pullFile downloads src into dest, resuming dest's part file when there is one. want is the
// size the model API announced (-1 = unknown), wantSHA its sha256 ("" = unknown). It returns the
// sha256 of the whole file.
func (o *resolved) pullFile(ctx context.Context, src, dest string, want int64, wantSHA string) (sum string, err error) {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", fmt.Errorf("create library directory: %w", err)
	}
	part := dest + partSuffix
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", part, err)
	}
	if err := lockPart(f); err != nil {
		f.Close()
		return "", fmt.Errorf("another ubatch is pulling this file (it holds %s); wait for it to finish", part)
	}
	keep := false
	defer func() {
		f.Close() // also releases the lock
		if err != nil && !keep {
			os.Remove(part)
			err = fmt.Errorf("%w; the partial download was deleted", err)
		}
	}()
	for attempt := 0; ; attempt++ {
		var retry bool
		sum, retry, keep, err = o.pullOnce(ctx, f, src, want, wantSHA)
		if !retry || attempt > 0 {
			break
		}
		o.Logger.Info("the server refused to resume; downloading the whole file again", "url", src)
	}
	if err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("write %s: %w", part, err)
	}
	if err := os.Rename(part, dest); err != nil {
		return "", fmt.Errorf("move download into place: %w", err)
	}
	return sum, nil
}

// pullOnce makes one request for what f lacks. retry asks for a fresh start (the part file was
// emptied because the server would not resume it); keep says the part file is worth resuming.
func (o *resolved) pullOnce(ctx context.Context, f *os.File, src string, want int64, wantSHA string) (sum string, retry, keep bool, err error) {
	h := sha256.New()
	off, err := hashPart(f, h, want)
	if err != nil {
		return "", false, false, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", false, false, err
	}
	o.setHeaders(req)
	if off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
	}
	idle := time.AfterFunc(o.IdleTimeout, func() { cancel(fmt.Errorf("no data received for %v", o.IdleTimeout)) })
	defer idle.Stop()
	resp, err := o.Client.Do(req)
	if err != nil {
		return "", false, off > 0, withCause(ctx, err)
	}
	defer resp.Body.Close()
	total, err := o.resumeStart(resp, f, &off, h)
	if err != nil {
		return "", resp.StatusCode == http.StatusRequestedRangeNotSatisfiable, false, err
	}
	if want >= 0 && total >= 0 && want != total {
		return "", false, false, fmt.Errorf("size mismatch: the model API announces %d bytes but the server sends %d", want, total)
	}
	if total < 0 {
		total = want
	}
	body := io.Reader(&watchedReader{r: resp.Body, idle: idle, timeout: o.IdleTimeout})
	if off == 0 {
		var magic [len(ggufMagic)]byte
		if n, err := io.ReadFull(body, magic[:]); err != nil {
			return "", false, false, fmt.Errorf("response of %d bytes is too short to be a GGUF file (%v)", n, withCause(ctx, err))
		}
		if string(magic[:]) != ggufMagic {
			return "", false, false, fmt.Errorf("not a GGUF file (starts with %q; the URL may lead to an HTML page or a pointer file)", magic[:])
		}
		body = io.MultiReader(strings.NewReader(ggufMagic), body)
	}
	pw := &progressWriter{w: io.MultiWriter(f, h), done: off, total: total, fn: o.Progress}
	pw.report()
	if _, err := io.Copy(pw, body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("connection closed early")
		}
		return "", false, true, fmt.Errorf("%w after %d of %d bytes: %v; they are kept: run the same pull again to resume",
			errCut, pw.done, total, withCause(ctx, err))
	}
	pw.report()
	switch {
	case total >= 0 && pw.done < total:
		return "", false, true, fmt.Errorf("%w after %d of %d bytes; they are kept: run the same pull again to resume", errCut, pw.done, total)
	case total >= 0 && pw.done > total:
		return "", false, false, fmt.Errorf("size mismatch: got %d bytes, expected %d", pw.done, total)
	case total < 0:
		if err := checkComplete(f.Name()); err != nil {
			return "", false, false, fmt.Errorf("the server announced no size and the %d bytes received are not a complete GGUF file, "+
				"so the download was probably cut short (retry): %w", pw.done, err)
		}
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if wantSHA != "" && sum != wantSHA {
		return "", false, false, fmt.Errorf("checksum mismatch: the file's sha256 is %s, the Hub announces %s", sum, wantSHA)
	}
	return sum, false, false, nil
}

// hashPart feeds the bytes already in the part file to h and returns their count; a part file
// that cannot be the start of the file (longer than it, not starting with the GGUF magic) is
// emptied instead.
func hashPart(f *os.File, h hash.Hash, want int64) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	off := st.Size()
	var magic [len(ggufMagic)]byte
	if off > 0 {
		_, err := f.ReadAt(magic[:], 0)
		if err != nil || string(magic[:]) != ggufMagic || (want >= 0 && off >= want) {
			off = 0
		}
	}
	if off > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, off)); err != nil {
			return 0, fmt.Errorf("read %s: %w", f.Name(), err)
		}
	}
	if err := f.Truncate(off); err != nil {
		return 0, fmt.Errorf("truncate %s: %w", f.Name(), err)
	}
	_, err = f.Seek(off, io.SeekStart)
	return off, err
}

// resumeStart checks the response against the offset asked for and returns the whole file's
// size (-1 if unknown). A 200 to a Range request (the server ignores ranges) restarts from 0.
func (o *resolved) resumeStart(resp *http.Response, f *os.File, off *int64, h hash.Hash) (int64, error) {
	switch {
	case resp.StatusCode == http.StatusPartialContent && *off > 0:
		var start, end, total int64
		cr := resp.Header.Get("Content-Range")
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &start, &end, &total); err != nil || start != *off {
			return 0, fmt.Errorf("the server answered the resume at byte %d with Content-Range %q", *off, cr)
		}
		o.Logger.Info("resuming download", "from", *off, "of", total)
		return total, nil
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		_ = f.Truncate(0)
		return 0, fmt.Errorf("the server cannot resume at byte %d (HTTP 416)", *off)
	}
	if err := checkStatus(resp); err != nil {
		return 0, err
	}
	if *off > 0 {
		*off = 0
		h.Reset()
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	return expectedSize(resp)
}
