package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
)

// repoRef is a repository with an optional quant tag: llama.cpp's -hf ORG/REPO[:QUANT].
type repoRef struct {
	org, repo string
	quant     string // as typed; "" = pick the default
}

func (r repoRef) String() string {
	s := r.org + "/" + r.repo
	if r.quant != "" {
		s += ":" + r.quant
	}
	return s
}

// parseRepoRef validates "ORG/REPO[:QUANT]". The parts must be plain names: they become
// directories of the library.
func parseRepoRef(arg string) (repoRef, error) {
	bad := func(why string) (repoRef, error) {
		return repoRef{}, fmt.Errorf("bad model reference %q: %s (want ORG/REPO[:QUANT], e.g. Qwen/Qwen3-0.6B-GGUF:Q4_K_M)", arg, why)
	}
	repo, quant, _ := strings.Cut(arg, ":")
	parts := strings.Split(repo, "/")
	if len(parts) != 2 {
		return bad("it needs an organisation and a repository")
	}
	for _, p := range append(parts, quant) {
		switch {
		case p == "." || p == "..":
			return bad("relative path component " + p)
		case strings.ContainsAny(p, "\\?#%:/ ") || strings.ContainsFunc(p, isControl):
			return bad(fmt.Sprintf("unsupported character in %q", p))
		}
	}
	if parts[0] == "" || parts[1] == "" {
		return bad("empty organisation or repository")
	}
	return repoRef{org: parts[0], repo: parts[1], quant: quant}, nil
}

// looksLikeRepo reports whether arg reads as ORG/REPO[:QUANT] rather than a file path: one
// slash, no .gguf extension, not absolute or relative to the working directory.
func looksLikeRepo(arg string) bool {
	repo, _, _ := strings.Cut(arg, ":")
	return strings.Count(repo, "/") == 1 && !strings.HasPrefix(arg, ".") && !strings.HasPrefix(arg, "/") &&
		!strings.HasSuffix(strings.ToLower(repo), ".gguf")
}

// repoFile is one file of a repository as the Hub's model API lists it.
type repoFile struct {
	Name   string // rfilename: slash-separated path in the repository
	Size   int64  // -1 when unknown
	SHA256 string // of an LFS file, "" when unknown
}

// modelInfo is the part of GET /api/models/ORG/REPO?blobs=true that matters here: with blobs,
// each sibling carries its size and, for LFS files (every GGUF), the sha256 of its content.
type modelInfo struct {
	Siblings []struct {
		RFilename string `json:"rfilename"`
		Size      *int64 `json:"size"`
		LFS       *struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"lfs"`
	} `json:"siblings"`
}

// listRepo asks the Hub's model API for the files of r.
func (o *resolved) listRepo(ctx context.Context, r repoRef) ([]repoFile, error) {
	u, _ := url.Parse(o.Endpoint) // validated in withDefaults
	u = u.JoinPath("api", "models", r.org, r.repo)
	u.RawQuery = "blobs=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	o.setHeaders(req)
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list the files of %s/%s: %w", r.org, r.repo, err)
	}
	defer resp.Body.Close()
	if err := checkStatus(resp); err != nil {
		return nil, fmt.Errorf("list the files of %s/%s: %w", r.org, r.repo, err)
	}
	var info modelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("list the files of %s/%s: the model API answered something that is not its JSON (%v); is HF_ENDPOINT a Hugging Face Hub?", r.org, r.repo, err)
	}
	var out []repoFile
	for _, s := range info.Siblings {
		f := repoFile{Name: s.RFilename, Size: -1}
		if s.Size != nil {
			f.Size = *s.Size
		}
		if s.LFS != nil {
			f.SHA256 = strings.ToLower(s.LFS.SHA256)
			if f.Size < 0 {
				f.Size = s.LFS.Size
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// setHeaders names the client and, with a token, authenticates as the user (gated and private
// repositories). Go's client drops Authorization on a redirect to another host, so the token
// never reaches the CDN the Hub redirects downloads to.
func (o *resolved) setHeaders(req *http.Request) {
	req.Header.Set("User-Agent", "ubatch")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
}

// defaultQuant is what llama.cpp's -hf takes when no tag is given (else the first file).
const defaultQuant = "Q4_K_M"

// shardRE matches the second and later files of a split GGUF (name-00002-of-00003.gguf).
var shardRE = regexp.MustCompile(`-(\d{5})-of-\d{5}\.gguf$`)

// candidates are the model files of a repository: .gguf files that are not the multimodal
// projector (mmproj) nor a later shard of a split model.
func candidates(files []repoFile) []repoFile {
	var out []repoFile
	for _, f := range files {
		low := strings.ToLower(f.Name)
		if path.Ext(low) != ".gguf" || strings.Contains(path.Base(low), "mmproj") {
			continue
		}
		if m := shardRE.FindStringSubmatch(low); m != nil && m[1] != "00001" {
			continue
		}
		out = append(out, f)
	}
	return out
}

// hasQuant reports whether file names quant as a token: case-insensitively, preceded by the
// start or one of "-._/" and followed by ".gguf" or '-' or '.' (Q4_K matches x-Q4_K.gguf but
// not x-Q4_K_M.gguf).
func hasQuant(file, quant string) bool {
	low, q := strings.ToLower(file), strings.ToLower(quant)
	for i := 0; ; {
		j := strings.Index(low[i:], q)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(q)
		before := start == 0 || strings.ContainsRune("-._/", rune(low[start-1]))
		after := end == len(low) || low[end] == '-' || low[end] == '.'
		if before && after {
			return true
		}
		i = start + 1
	}
}

// pickFile chooses r's file among a repository's files: the one naming r.quant, or with no
// quant the default (Q4_K_M, else the first, as llama.cpp's -hf). note says why when a choice
// was made for the user.
func pickFile(r repoRef, files []repoFile) (f repoFile, note string, err error) {
	cands := candidates(files)
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	if len(cands) == 0 {
		return repoFile{}, "", fmt.Errorf("%s/%s has no .gguf file (is it a GGUF repository? many have a -GGUF twin)", r.org, r.repo)
	}
	match := func(q string) []repoFile {
		return slices.DeleteFunc(slices.Clone(cands), func(c repoFile) bool { return !hasQuant(c.Name, q) })
	}
	if r.quant == "" {
		if len(cands) == 1 {
			return cands[0], "", nil
		}
		pick := cands[0]
		if m := match(defaultQuant); len(m) > 0 {
			pick = m[0]
		}
		return pick, fmt.Sprintf("%s/%s has %d .gguf files, took %s (add :QUANT to choose; the files: %s)",
			r.org, r.repo, len(cands), pick.Name, strings.Join(names, ", ")), nil
	}
	switch m := match(r.quant); len(m) {
	case 1:
		return m[0], "", nil
	case 0:
		return repoFile{}, "", fmt.Errorf("%s/%s has no .gguf file for quant %q; it has: %s", r.org, r.repo, r.quant, strings.Join(names, ", "))
	default:
		var ms []string
		for _, c := range m {
			ms = append(ms, c.Name)
		}
		return repoFile{}, "", fmt.Errorf("%s/%s has %d .gguf files for quant %q: %s; pull one by name with hf://%s/%s/FILE.gguf",
			r.org, r.repo, len(m), r.quant, strings.Join(ms, ", "), r.org, r.repo)
	}
}

// knownQuants are the quant tags llama.cpp's quantize writes into file names, longest first so
// that Q4_K_M is found before Q4_K; a file naming one gets it as its name's tag.
var knownQuants = func() []string {
	q := []string{"F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_K", "Q5_0", "Q5_1", "Q4_K_M", "Q4_K_S",
		"Q4_K", "Q4_0", "Q4_1", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q3_K", "Q2_K_S", "Q2_K", "IQ4_XS", "IQ4_NL", "IQ3_M",
		"IQ3_S", "IQ3_XS", "IQ3_XXS", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ1_0", "TQ2_0", "MXFP4"}
	slices.SortStableFunc(q, func(a, b string) int { return len(b) - len(a) })
	return q
}()

// quantOf is the quant tag file names, lowercased, or "" when it names none of knownQuants.
func quantOf(file string) string {
	for _, q := range knownQuants {
		if hasQuant(path.Base(file), q) {
			return strings.ToLower(q)
		}
	}
	return ""
}

// shortName is the library name of file from org/repo: the repository's name lowercased without
// a -GGUF suffix, a colon, and the quant (else the file's stem): qwen3-0.6b:q4_k_m. It depends on
// nothing but the names, so it is the same on every machine.
func shortName(repo, file string) string {
	base := strings.ToLower(repo)
	for _, suf := range []string{"-gguf", "_gguf", ".gguf"} {
		base = strings.TrimSuffix(base, suf)
	}
	tag := quantOf(file)
	if tag == "" {
		tag = strings.ToLower(strings.TrimSuffix(path.Base(file), path.Ext(file)))
	}
	return base + ":" + tag
}
