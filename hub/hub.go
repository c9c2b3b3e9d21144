// Package hub turns the model a user asked for into a local GGUF file: a path on disk, a
// Hugging Face file (hf://ORG/REPO/PATH.gguf, downloaded once into a cache), or, when nothing
// is given, the small stories260K demo model compiled into the binary; and keeps the library of pulled models
// ($UBATCH_HOME/models, see library.go) that names resolve from.
//
// The cache keeps the hub's layout so it stays readable and easy to fill by hand:
// $UBATCH_HOME/ORG/REPO/PATH.gguf, with UBATCH_HOME defaulting to ~/.cache/ubatch.
package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"ubatch/internal/demo"
)

// Options controls where Resolve looks and how it downloads. The zero value is usable.
type Options struct {
	Home     string                  // cache dir; "" = $UBATCH_HOME or ~/.cache/ubatch
	Endpoint string                  // hub base URL; "" = $HF_ENDPOINT or https://huggingface.co
	Token    string                  // Hugging Face access token sent as a Bearer; "" = $HF_TOKEN
	Client   *http.Client            // nil = http.DefaultClient
	Progress func(done, total int64) // called during a download, at most every 100ms and once at the end; total < 0 if unknown
	Logger   *slog.Logger            // nil = discard
	// IdleTimeout aborts a download that receives no data for this long, so a stalled
	// connection cannot hang the caller forever; 0 = 60s.
	IdleTimeout time.Duration
}

const (
	defaultEndpoint = "https://huggingface.co"
	defaultIdle     = 60 * time.Second

	// demoRef is where the demo model came from: a copy downloaded there by an earlier version
	// is still used.
	demoRef = "hf://ggml-org/models/tinyllamas/stories260K.gguf"

	howTo = "pass -m PATH.gguf, -m NAME (see ubatch list), -m ORG/REPO[:QUANT] or -m hf://ORG/REPO/FILE.gguf"
)

// Resolve turns a model argument into a local file path.
//
//   - "" selects the demo model stories260K.gguf: a file placed by hand at
//     $UBATCH_HOME/stories260K.gguf, or one an earlier version downloaded to
//     $UBATCH_HOME/ggml-org/models/tinyllamas/stories260K.gguf, else the copy compiled into the
//     binary (package internal/demo), written once to $UBATCH_HOME/demo/stories260K.gguf and
//     rewritten whenever that file's bytes differ from it. No network, no shared folder.
//   - "hf://ORG/REPO/PATH.gguf" downloads ENDPOINT/ORG/REPO/resolve/main/PATH.gguf into
//     $UBATCH_HOME/ORG/REPO/PATH.gguf unless it is already there.
//   - anything else is an existing file; else a library model ($UBATCH_HOME/models, see Pull)
//     by its name or the ORG/REPO[:QUANT] it was pulled as; else an ORG/REPO[:QUANT] (one
//     slash, no .gguf), which is pulled into the library.
//
// Downloads are written to a temporary ".part" file beside the destination, checked (GGUF magic;
// size against the server's Content-Length and X-Linked-Size, or, when the server announces
// neither, a parse of the whole file that finds every tensor's data inside it) and renamed into
// place, so a failed, cut or cancelled download leaves nothing behind. Part files of downloads
// that died (killed processes) are removed by the next download of the same file.
func Resolve(ctx context.Context, arg string, opts Options) (string, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	switch {
	case arg == "":
		return o.resolveDemo()
	case strings.HasPrefix(arg, "hf://"):
		ref, err := parseRef(arg)
		if err != nil {
			return "", err
		}
		return o.fetch(ctx, ref)
	default:
		return o.resolveName(ctx, arg)
	}
}

// resolveName resolves what is neither "" nor hf://: an existing file, else a library model by
// name or by the ORG/REPO[:QUANT] it was pulled as, else an ORG/REPO[:QUANT] to pull now (as
// hf:// references are downloaded on first use), else a missing file.
func (o *resolved) resolveName(ctx context.Context, arg string) (string, error) {
	if _, err := os.Stat(arg); err == nil || o.homeErr != nil {
		return resolveLocal(arg)
	}
	m, ok, err := o.lookup(arg)
	switch {
	case err != nil:
		return "", err
	case ok && m.Problem != "":
		return "", fmt.Errorf("library model %s: %s", m.Name, m.Problem)
	case ok:
		return m.Path, nil
	case looksLikeRepo(arg):
		m, note, err := o.pull(ctx, arg)
		if note != "" {
			o.Logger.Info(note)
		}
		if err != nil {
			return "", fmt.Errorf("%q is no file and no library name (ubatch list), and pulling it from the Hub failed: %w", arg, err)
		}
		o.Logger.Info("model pulled into the library", "name", m.Name, "path", m.Path)
		return m.Path, nil
	}
	return resolveLocal(arg)
}

// resolved is Options with every default filled in.
type resolved struct {
	Options
	homeErr error // why Home is unknown, reported only when the cache is needed
}

func (opts Options) withDefaults() (*resolved, error) {
	o := &resolved{Options: opts}
	if o.Home == "" {
		o.Home = os.Getenv("UBATCH_HOME")
	}
	if o.Home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			o.Home = filepath.Join(h, ".cache", "ubatch")
		} else {
			o.homeErr = fmt.Errorf("no cache directory: set UBATCH_HOME (%w)", err)
		}
	}
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv("HF_ENDPOINT")
	}
	if o.Token == "" {
		o.Token = os.Getenv("HF_TOKEN")
	}
	if o.Endpoint == "" {
		o.Endpoint = defaultEndpoint
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("hub endpoint %q is not an http(s) URL", o.Endpoint)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = defaultIdle
	}
	return o, nil
}

// ref names one file in a hub repository.
type ref struct {
	org, repo string
	file      string // slash-separated path inside the repository
}

func (r ref) String() string { return "hf://" + r.org + "/" + r.repo + "/" + r.file }

// parseRef validates "hf://ORG/REPO/PATH.gguf". Every component must be a plain name so the
// cache path cannot escape the cache directory.
func parseRef(arg string) (ref, error) {
	bad := func(why string) (ref, error) {
		return ref{}, fmt.Errorf("bad model reference %q: %s (want hf://ORG/REPO/PATH.gguf)", arg, why)
	}
	parts := strings.Split(strings.TrimPrefix(arg, "hf://"), "/")
	if len(parts) < 3 {
		return bad("it needs an organisation, a repository and a file")
	}
	for _, p := range parts {
		switch {
		case p == "":
			return bad("empty path component")
		case p == "." || p == "..":
			return bad("relative path component " + p)
		case strings.ContainsAny(p, "\\?#%:") || strings.ContainsFunc(p, isControl):
			return bad(fmt.Sprintf("unsupported character in %q", p))
		}
	}
	r := ref{org: parts[0], repo: parts[1], file: strings.Join(parts[2:], "/")}
	if !strings.EqualFold(path.Ext(r.file), ".gguf") {
		return bad("the file must be a .gguf")
	}
	return r, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// cachePath is where r lives in the cache.
func (o *resolved) cachePath(r ref) (string, error) {
	if o.homeErr != nil {
		return "", o.homeErr
	}
	return filepath.Join(o.Home, r.org, r.repo, filepath.FromSlash(r.file)), nil
}

// url is r's download address on the hub.
func (o *resolved) url(r ref) string {
	u, _ := url.Parse(o.Endpoint) // validated in withDefaults
	elems := append([]string{r.org, r.repo, "resolve", "main"}, strings.Split(r.file, "/")...)
	return u.JoinPath(elems...).String()
}

// fetch returns the cached copy of r, downloading it first if needed.
func (o *resolved) fetch(ctx context.Context, r ref) (string, error) {
	dest, err := o.cachePath(r)
	if err != nil {
		return "", err
	}
	if isFile(dest) {
		o.Logger.Debug("model found in cache", "model", r.String(), "path", dest)
		return dest, nil
	}
	if lib, err := o.libraryPath(r); err == nil && isFile(lib) { // pulled with ubatch pull
		return lib, nil
	}
	src := o.url(r)
	o.Logger.Info("downloading model", "model", r.String(), "url", src, "path", dest)
	if err := o.download(ctx, src, dest); err != nil {
		return "", fmt.Errorf("download %s: %w", r, err)
	}
	return dest, nil
}

func (o *resolved) resolveDemo() (string, error) {
	if o.homeErr != nil {
		return "", fmt.Errorf("no model: %s, or set UBATCH_HOME for the built-in demo model: %w", howTo, o.homeErr)
	}
	r, _ := parseRef(demoRef)
	hubLayout, _ := o.cachePath(r)
	for _, p := range []string{hubLayout, filepath.Join(o.Home, demo.Name)} {
		if isFile(p) {
			return p, nil
		}
	}
	p := filepath.Join(o.Home, "demo", demo.Name)
	if err := writeDemo(p); err != nil {
		return "", fmt.Errorf("no model: the built-in demo model cannot be written to %s (%w): set UBATCH_HOME to a writable folder, or %s", p, err, howTo)
	}
	return p, nil
}

// writeDemo makes p hold the embedded demo model: it leaves a file that already holds exactly
// those bytes, and otherwise (missing, cut short, edited) writes them to a temporary file beside
// p and renames it into place, so that a concurrent reader never maps half a model.
func writeDemo(p string) error {
	if b, err := os.ReadFile(p); err == nil && string(b) == demo.GGUF {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+demo.Name+".*.part")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(demo.GGUF)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func resolveLocal(p string) (string, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		hint := ""
		if !filepath.IsAbs(p) && strings.Count(p, "/") >= 2 && strings.HasSuffix(strings.ToLower(p), ".gguf") {
			hint = fmt.Sprintf(" (for a Hugging Face file use hf://%s)", p)
		}
		return "", fmt.Errorf("model file %q not found%s: %s", p, hint, howTo)
	case err != nil:
		return "", fmt.Errorf("model file %q: %w", p, err)
	case fi.IsDir():
		return "", fmt.Errorf("model path %q is a directory, not a file: %s", p, howTo)
	}
	return p, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
