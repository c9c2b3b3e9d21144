package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"ubatch/hub"
)

// cmdCreate is `ubatch create NAME [-f Modelfile|FILE.gguf]`: a local GGUF into the library
// under NAME, as Ollama's create: the file itself, or a Modelfile whose FROM names it.
func cmdCreate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("create", "create NAME [-f Modelfile | -f FILE.gguf]", stderr)
	file := fs.StringP("file", "f", "Modelfile", "a GGUF file, or a Modelfile whose FROM line names one (relative to the Modelfile's folder)")
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "ubatch create: name the model, e.g. ubatch create mymodel -f ./model.gguf\n")
		return errUsage
	}
	src, err := modelfileSource(*file)
	if err != nil {
		return err
	}
	m, err := hub.Create(fs.Arg(0), src, hub.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\t%s\t%s\n", m.Name, humanSize(m.Size), m.Path)
	return nil
}

// modelfileSource is the GGUF that -f names: the file itself when it starts with GGUF's magic,
// else the FROM of the Modelfile it is. Instructions that would change the model (PARAMETER,
// TEMPLATE, SYSTEM, ADAPTER, MESSAGE) are refused rather than dropped unsaid.
func modelfileSource(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("-f %s: %w (give a .gguf file or a Modelfile with FROM ./FILE.gguf)", path, err)
	}
	if bytes.HasPrefix(data, []byte("GGUF")) {
		return path, nil
	}
	from := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "FROM":
			if from != "" {
				return "", fmt.Errorf("%s:%d: a second FROM (give one GGUF file)", path, n)
			}
			from = strings.Trim(strings.TrimSpace(rest), `"`)
		case "LICENSE":
			// the GGUF's own general.license is what ubatch show prints
		case "PARAMETER", "TEMPLATE", "SYSTEM", "ADAPTER", "MESSAGE", "REQUIRES":
			return "", fmt.Errorf("%s:%d: %s is not supported: ubatch create takes FROM a GGUF file only (set sampling in each request or with serve's flags, the template with serve --chat-template)", path, n, strings.ToUpper(verb))
		default:
			return "", fmt.Errorf("%s:%d: %q is not a Modelfile instruction", path, n, verb)
		}
	}
	if from == "" {
		return "", fmt.Errorf("%s: neither a GGUF file nor a Modelfile with a FROM line", path)
	}
	if strings.HasPrefix(from, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			from = filepath.Join(home, from[2:])
		}
	}
	if !filepath.IsAbs(from) {
		from = filepath.Join(filepath.Dir(path), from)
	}
	if fi, err := os.Stat(from); err != nil || fi.IsDir() {
		return "", fmt.Errorf("%s: FROM %s: no such file (ubatch create takes a local GGUF file; ubatch pull ORG/REPO:QUANT for one on the Hub)", path, from)
	}
	return from, nil
}
