package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// NormalizeName is a model name as the library stores and compares it, Ollama's rule: lower
// case, and ":latest" when it has no tag ("Qwen3" → "qwen3:latest"). hf:// references and paths
// are left as they are (lowercased).
func NormalizeName(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" || strings.Contains(n, "://") || strings.HasSuffix(n, ".gguf") {
		return n
	}
	if !strings.Contains(n[strings.LastIndex(n, "/")+1:], ":") {
		n += ":latest"
	}
	return n
}

// createdName is the form of a name ubatch create gives: NAME[/NAME...]:TAG of letters, digits
// and . _ - (so that it is also a path inside the library).
var createdName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*:[a-z0-9][a-z0-9._-]*$`)

// localOrg is the library folder of created models: models/local/NAME/TAG.gguf.
const localOrg = "local"

// Create adds the GGUF file src to the library under name (":latest" implied), as Ollama's
// create does: src is hard-linked to models/local/NAME/TAG.gguf when it is on the library's
// file system, else copied, with a manifest as a pull's (source: src's absolute path). The file
// is checked to be a GGUF ubatch reads (its header and tensor table) first. A model created
// under that name before is replaced; a pulled one is not (remove it first).
func Create(name, src string, opts Options) (Model, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Model{}, err
	}
	name = NormalizeName(name)
	if len(name) > 128 || !createdName.MatchString(name) || strings.Contains(name, "..") {
		return Model{}, fmt.Errorf("model name %q: use NAME[:TAG] of letters, digits, '.', '_' and '-' (NAME may have '/' parts), at most 128 characters", name)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return Model{}, err
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return Model{}, fmt.Errorf("the model file: %w", err)
	case !fi.Mode().IsRegular():
		return Model{}, fmt.Errorf("%s is not a regular file: give a .gguf file", abs)
	}
	_, qt, err := Describe(abs)
	if err != nil {
		return Model{}, fmt.Errorf("not a GGUF file ubatch can read: %w", err)
	}
	base, tag, _ := strings.Cut(name, ":")
	dir, err := o.libraryDir()
	if err != nil {
		return Model{}, err
	}
	dest := filepath.Join(dir, localOrg, filepath.FromSlash(base), tag+".gguf")
	if old, ok, err := o.lookup(name); err != nil {
		return Model{}, err
	} else if ok && old.Name == name && old.Path != dest {
		return Model{}, fmt.Errorf("%s is the name of a pulled model (%s): ubatch rm %s first, or choose another name", name, old.Source, name)
	}
	sum, err := placeFile(abs, dest)
	if err != nil {
		return Model{}, err
	}
	m := Model{Name: name, Source: abs, Repo: localOrg + "/" + base, File: tag + ".gguf", Size: fi.Size(), SHA256: sum,
		PulledAt: time.Now().UTC().Truncate(time.Second), Path: dest, Manifest: dest + manifestExt}
	if qt != "?" {
		m.Quant = strings.ToLower(qt)
	}
	if err := writeManifest(m); err != nil {
		return Model{}, err
	}
	return m, nil
}

// placeFile makes dest hold src's bytes, a hard link when the file system allows, else a copy
// written beside dest and renamed into place; it returns the file's SHA-256 for the manifest.
func placeFile(src, dest string) (string, error) {
	if src == dest { // created again from the library's own file: only the manifest is rewritten
		return fileSHA256(dest)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", fmt.Errorf("create the library folder: %w", err)
	}
	if err := os.Remove(dest); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("replace %s: %w", dest, err)
	}
	if os.Link(src, dest) == nil {
		return fileSHA256(dest)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	part := dest + partSuffix
	out, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("copy into the library: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, dest)
	}
	if err != nil {
		os.Remove(part)
		return "", fmt.Errorf("copy %s into the library: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileSHA256 is the SHA-256 of the file at p, in hex.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
