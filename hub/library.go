package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The library is $UBATCH_HOME/models, laid out as the Hub is: models/ORG/REPO/FILE.gguf, each
// with a manifest beside it, FILE.gguf.json, that records where it came from and the name it
// answers to. The manifests are the whole index: no database, and a model removed by hand
// (both files) is simply gone.

// Model is one library entry: its manifest, and where it lives.
type Model struct {
	Name     string    `json:"name"`             // short stable name: qwen3-0.6b:q4_k_m
	Source   string    `json:"source"`           // what was pulled: ORG/REPO[:QUANT] or hf://ORG/REPO/FILE.gguf
	Repo     string    `json:"repo"`             // ORG/REPO
	File     string    `json:"file"`             // path in the repository
	Quant    string    `json:"quant,omitempty"`  // the file name's quant tag, lowercased
	Size     int64     `json:"size"`             // bytes
	SHA256   string    `json:"sha256,omitempty"` // of the file, computed during the download
	PulledAt time.Time `json:"pulled_at"`

	Path     string `json:"-"` // the GGUF file
	Manifest string `json:"-"` // its manifest
	Problem  string `json:"-"` // why the entry cannot be used ("" = it can)
}

const manifestExt = ".json"

// libraryDir is where the library lives.
func (o *resolved) libraryDir() (string, error) {
	if o.Library != "" {
		return o.Library, nil
	}
	if o.homeErr != nil {
		return "", o.homeErr
	}
	return filepath.Join(o.Home, "models"), nil
}

// libraryPath is where r's file lives in the library.
func (o *resolved) libraryPath(r ref) (string, error) {
	dir, err := o.libraryDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, r.org, r.repo, filepath.FromSlash(r.file)), nil
}

// Pull puts the model arg names (ORG/REPO[:QUANT] or hf://ORG/REPO/FILE.gguf) into the library,
// downloading it unless it is there already. note, when not empty, tells the user about a
// choice made for them (which of several files was taken).
func Pull(ctx context.Context, arg string, opts Options) (m Model, note string, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Model{}, "", err
	}
	return o.pull(ctx, arg)
}

func (o *resolved) pull(ctx context.Context, arg string) (Model, string, error) {
	var r ref
	file := repoFile{Size: -1}
	note := ""
	if strings.HasPrefix(arg, "hf://") {
		var err error
		if r, err = parseRef(arg); err != nil {
			return Model{}, "", err
		}
	} else {
		rr, err := parseRepoRef(arg)
		if err != nil {
			return Model{}, "", err
		}
		files, err := o.listRepo(ctx, rr)
		if err != nil {
			return Model{}, "", err
		}
		if file, note, err = pickFile(rr, files); err != nil {
			return Model{}, "", err
		}
		r = ref{org: rr.org, repo: rr.repo, file: file.Name}
		if _, err := parseRef(r.String()); err != nil { // the API's file name becomes a path
			return Model{}, "", fmt.Errorf("%s: the Hub lists a file ubatch cannot store: %w", arg, err)
		}
	}
	dest, err := o.libraryPath(r)
	if err != nil {
		return Model{}, "", err
	}
	if m, err := readManifest(dest + manifestExt); err == nil && m.Problem == "" {
		o.Logger.Debug("model already in the library", "name", m.Name, "path", m.Path)
		return m, note, nil
	}
	o.Logger.Info("pulling model", "model", r.String(), "path", dest)
	sum, err := o.pullFile(ctx, o.url(r), dest, file.Size, file.SHA256)
	if err != nil {
		return Model{}, note, fmt.Errorf("pull %s: %w", r, err)
	}
	st, err := os.Stat(dest)
	if err != nil {
		return Model{}, note, err
	}
	m := Model{Name: o.freeName(r), Source: arg, Repo: r.org + "/" + r.repo, File: r.file, Quant: quantOf(r.file),
		Size: st.Size(), SHA256: sum, PulledAt: time.Now().UTC().Truncate(time.Second), Path: dest, Manifest: dest + manifestExt}
	if err := writeManifest(m); err != nil {
		return Model{}, note, err
	}
	return m, note, nil
}

// freeName is r's short name, or, when another repository's file already has it (the same
// model quantised by two publishers), the name prefixed with the organisation.
func (o *resolved) freeName(r ref) string {
	name := shortName(r.repo, r.file)
	models, _ := o.list()
	for _, m := range models {
		if m.Name == name && (m.Repo != r.org+"/"+r.repo || m.File != r.file) {
			return strings.ToLower(r.org) + "/" + name
		}
	}
	return name
}

func writeManifest(m Model) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := m.Manifest + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the manifest: %w", err)
	}
	if err := os.Rename(tmp, m.Manifest); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the manifest: %w", err)
	}
	return nil
}

// readManifest reads the manifest at p. An entry whose file is gone or differs in size from the
// manifest is returned with Problem set; only an unreadable manifest is an error.
func readManifest(p string) (Model, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return Model{}, err
	}
	var m Model
	if err := json.Unmarshal(data, &m); err != nil || m.Name == "" {
		return Model{}, fmt.Errorf("manifest %s is not valid (%v): delete it and pull the model again", p, err)
	}
	m.Manifest = p
	m.Path = strings.TrimSuffix(p, manifestExt)
	switch st, err := os.Stat(m.Path); {
	case err != nil:
		m.Problem = fmt.Sprintf("the file %s is missing: ubatch pull %s again, or ubatch rm %s", m.Path, m.Source, m.Name)
	case st.Size() != m.Size:
		m.Problem = fmt.Sprintf("the file %s has %d bytes, the manifest says %d: ubatch rm %s and pull it again", m.Path, st.Size(), m.Size, m.Name)
	}
	return m, nil
}

// List returns the library's models sorted by name; a broken manifest is logged and skipped.
func List(opts Options) ([]Model, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return o.list()
}

func (o *resolved) list() ([]Model, error) {
	dir, err := o.libraryDir()
	if err != nil {
		return nil, err
	}
	var out []Model
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case !d.Type().IsRegular() || !strings.HasSuffix(strings.ToLower(p), ".gguf"+manifestExt):
			return nil
		}
		m, err := readManifest(p)
		if err != nil {
			o.Logger.Warn("skipping a library entry", "err", err)
			return nil
		}
		out = append(out, m)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the library %s: %w", dir, err)
	}
	slices.SortFunc(out, func(a, b Model) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// matches reports whether arg names m: its short name, the source it was pulled by, its
// ORG/REPO:QUANT, or its hf:// reference (names and repositories compare without case, as
// the Hub's do).
func (m Model) matches(arg string) bool {
	return strings.EqualFold(arg, m.Name) || strings.EqualFold(arg, m.Source) ||
		(m.Quant != "" && strings.EqualFold(arg, m.Repo+":"+m.Quant)) || arg == "hf://"+m.Repo+"/"+m.File
}

// lookup finds the library model arg names; ok is false when none does.
func (o *resolved) lookup(arg string) (m Model, ok bool, err error) {
	models, err := o.list()
	if err != nil {
		return Model{}, false, err
	}
	for _, m := range models {
		if m.Name == strings.ToLower(arg) || m.Name == NormalizeName(arg) { // a name wins over another entry's source
			return m, true, nil
		}
	}
	for _, m := range models {
		if m.matches(arg) {
			return m, true, nil
		}
	}
	return Model{}, false, nil
}

// names lists the library's names for an error message.
func names(models []Model) string {
	if len(models) == 0 {
		return "the library is empty (ubatch pull ORG/REPO:QUANT)"
	}
	var s []string
	for _, m := range models {
		s = append(s, m.Name)
	}
	return "the library has: " + strings.Join(s, ", ")
}

// Remove deletes the model arg names from the library: its file, its manifest and any part file.
func Remove(arg string, opts Options) (Model, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Model{}, err
	}
	m, ok, err := o.lookup(arg)
	if err != nil {
		return Model{}, err
	}
	if !ok {
		models, _ := o.list()
		return Model{}, fmt.Errorf("no model %q in the library; %s", arg, names(models))
	}
	for _, p := range []string{m.Path, m.Path + partSuffix, m.Manifest} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return m, fmt.Errorf("remove %s: %w", p, err)
		}
	}
	// Empty ORG/REPO directories are removed too so that the library stays readable by hand.
	root, _ := o.libraryDir()
	for dir := filepath.Dir(m.Path); dir != root && strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return m, nil
}
