package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"ubatch/gguf"
)

// ggufMagic opens every GGUF file.
const ggufMagic = "GGUF"

// progressEvery throttles Options.Progress.
const progressEvery = 100 * time.Millisecond

// download fetches src into dest through a temporary ".part" file in dest's directory, which it
// removes on any failure. The body must start with the GGUF magic, and either match the size the
// server announced or, when it announced none, parse as a complete GGUF file (header, tensor
// infos and every tensor's data inside the file): a connection closed early then shows as a
// file too short for its own tensors. Part files left by an earlier download of dest that died
// (SIGKILL, power loss) are removed first.
func (o *resolved) download(ctx context.Context, src, dest string) (err error) {
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cache directory: %w", err)
	}
	o.removeStaleParts(dest)
	// The idle watchdog cancels this context when no data arrives for IdleTimeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return err
	}
	o.setHeaders(req)
	idle := time.AfterFunc(o.IdleTimeout, func() {
		cancel(fmt.Errorf("no data received for %v", o.IdleTimeout))
	})
	defer idle.Stop()
	resp, err := o.Client.Do(req)
	if err != nil {
		return withCause(ctx, err)
	}
	defer resp.Body.Close()
	if err := checkStatus(resp); err != nil {
		return err
	}
	want, err := expectedSize(resp)
	if err != nil {
		return err
	}
	body := &watchedReader{r: resp.Body, idle: idle, timeout: o.IdleTimeout}
	var magic [len(ggufMagic)]byte
	if n, err := io.ReadFull(body, magic[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("response of %d bytes is too short to be a GGUF file", n)
		}
		return withCause(ctx, err)
	}
	if string(magic[:]) != ggufMagic {
		return fmt.Errorf("not a GGUF file (starts with %q; the URL may lead to an HTML page or a pointer file)", magic[:])
	}

	tmp, err := createPart(dest)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("%w; the partial download was deleted", err)
		}
	}()
	pw := &progressWriter{w: tmp, done: 0, total: want, fn: o.Progress}
	if _, err := pw.Write(magic[:]); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if _, err := io.Copy(pw, body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("truncated download: got %d of %d bytes", pw.done, want)
		}
		return withCause(ctx, err)
	}
	if want >= 0 && pw.done != want {
		return fmt.Errorf("size mismatch: got %d bytes, expected %d", pw.done, want)
	}
	pw.report()
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if want < 0 {
		if err := checkComplete(tmp.Name()); err != nil {
			return fmt.Errorf("the server announced no size and the %d bytes received are not a complete GGUF file, "+
				"so the download was probably cut short (retry): %w", pw.done, err)
		}
	}
	// Closing releases the lock that tells other processes the part file is in use; the file is
	// complete by now, so a cleaner that removes it before the rename only costs a retry.
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("move download into place: %w", err)
	}
	return nil
}

// checkComplete parses the GGUF file at p, which places every tensor's data inside the file.
func checkComplete(p string) error {
	f, err := gguf.Open(p)
	if err != nil {
		return err
	}
	return f.Close()
}

// withCause replaces a bare context error by the reason the context was cancelled (such as the
// idle watchdog firing), which is what the user needs to read.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}

func checkStatus(resp *http.Response) error {
	switch c := resp.StatusCode; {
	case c == http.StatusOK:
		return nil
	case c == http.StatusNotFound:
		return fmt.Errorf("not found (HTTP 404): check the organisation, repository and file name")
	case c == http.StatusUnauthorized || c == http.StatusForbidden:
		return fmt.Errorf("access denied (HTTP %d): the repository may be private or gated", c)
	default:
		return fmt.Errorf("unexpected HTTP status %s", resp.Status)
	}
}

// expectedSize returns the body size announced by the server, or -1 when it announced none.
// Hugging Face answers /resolve/ for large files with a redirect carrying X-Linked-Size, the
// size of the stored file; when both it and Content-Length are known they must agree.
func expectedSize(resp *http.Response) (int64, error) {
	linked := int64(-1)
	for r := resp; r != nil; {
		if v := r.Header.Get("X-Linked-Size"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("server sent an invalid X-Linked-Size %q", v)
			}
			linked = n
			break
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response // the redirect that led to this request, if any
	}
	cl := resp.ContentLength
	switch {
	case linked >= 0 && cl >= 0 && linked != cl:
		return 0, fmt.Errorf("size mismatch: the hub announces %d bytes but the server sends %d", linked, cl)
	case cl >= 0:
		return cl, nil
	}
	return linked, nil
}

// watchedReader pushes the idle watchdog back whenever data arrives.
type watchedReader struct {
	r       io.Reader
	idle    *time.Timer
	timeout time.Duration
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.idle.Reset(w.timeout)
	}
	return n, err
}

// progressWriter counts bytes written through it and reports them at most every progressEvery.
type progressWriter struct {
	w           io.Writer
	done, total int64
	fn          func(done, total int64)
	last        time.Time
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.done += int64(n)
	if p.fn != nil && time.Since(p.last) >= progressEvery {
		p.report()
	}
	return n, err
}

func (p *progressWriter) report() {
	if p.fn != nil {
		p.last = time.Now()
		p.fn(p.done, p.total)
	}
}
