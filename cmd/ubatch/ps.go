package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"ubatch/hub"
)

// serverFlags name the running server that ps and stop talk to, as Ollama's CLI talks to its
// server.
type serverFlags struct {
	host   *string
	port   *int
	apiKey *string
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	f.host = fs.String("host", "127.0.0.1", "the server's address (ubatch serve --host)")
	f.port = fs.Int("port", 8080, "the server's port (ubatch serve --port)")
	f.apiKey = fs.String("api-key", "", "the server's --api-key, if it has one")
}

func (f *serverFlags) check() error {
	if *f.port < 1 || *f.port > 65535 {
		return fmt.Errorf("--port %d: must be in [1, 65535]", *f.port)
	}
	return nil
}

// call sends body (GET when nil) to the server's path and decodes a 200 answer into out.
func (f *serverFlags) call(ctx context.Context, path string, body any, out any) error {
	base := "http://" + net.JoinHostPort(*f.host, strconv.Itoa(*f.port))
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a stop may wait for the answer in flight
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	if *f.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+*f.apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("no server at %s (start one with ubatch serve, or give its --host and --port): %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error any }
		if json.Unmarshal(data, &e) == nil && e.Error != nil {
			return fmt.Errorf("%s %s: %s: %v", method, path, resp.Status, e.Error)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected (is it a ubatch or Ollama server?): %w", method, path, err)
	}
	return nil
}

// psModel is one model of /api/ps.
type psModel struct {
	Name          string    `json:"name"`
	Model         string    `json:"model"`
	Size          int64     `json:"size"`
	Digest        string    `json:"digest"`
	ExpiresAt     time.Time `json:"expires_at"`
	SizeVRAM      int64     `json:"size_vram"`
	ContextLength int       `json:"context_length"`
}

// loaded is what the server has loaded (/api/ps).
func (f *serverFlags) loaded(ctx context.Context) ([]psModel, error) {
	var ps struct {
		Models []psModel `json:"models"`
	}
	err := f.call(ctx, "/api/ps", nil, &ps)
	return ps.Models, err
}

// cmdPs is `ubatch ps`: the models a running server has loaded, in Ollama's columns.
func cmdPs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ps", "ps [--host 127.0.0.1] [--port 8080]", stderr)
	var sf serverFlags
	sf.register(fs)
	if err := parse(fs, args, sf.check); err != nil {
		return err
	}
	models, err := sf.loaded(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tPROCESSOR\tCONTEXT\tUNTIL")
	now := time.Now()
	for _, m := range models {
		proc := "100% CPU" // size_vram is 0: ubatch computes on the CPU
		if m.SizeVRAM > 0 && m.Size > 0 {
			proc = fmt.Sprintf("%d%% GPU", m.SizeVRAM*100/m.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, shortDigest(m.Digest), humanSize(m.Size), proc, m.ContextLength, until(m.ExpiresAt, now))
	}
	return tw.Flush()
}

// shortDigest is a digest's first 12 hex digits, as Ollama's ID column.
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return d[:min(12, len(d))]
}

// until words when a model unloads as Ollama's UNTIL column does.
func until(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case t.IsZero():
		return ""
	case t.Year() >= 2300: // kept: the far-future expiry of keep_alive -1
		return "Forever"
	case d <= 0:
		return "Stopping..."
	case d < time.Minute:
		return fmt.Sprintf("%d seconds from now", int(d.Seconds()))
	case d < 2*time.Minute:
		return "About a minute from now"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes from now", int(d.Minutes()))
	case d < 2*time.Hour:
		return "About an hour from now"
	}
	return fmt.Sprintf("%d hours from now", int(d.Hours()))
}

// cmdStop is `ubatch stop NAME`: unload a model of a running server now, as Ollama's stop
// does: a generate request without a prompt and keep_alive 0.
func cmdStop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("stop", "stop NAME [--host 127.0.0.1] [--port 8080]", stderr)
	var sf serverFlags
	sf.register(fs)
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if err := sf.check(); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "ubatch stop: name one model (see ubatch ps)\n")
		return errUsage
	}
	name := fs.Arg(0)
	models, err := sf.loaded(ctx)
	if err != nil {
		return err
	}
	var found *psModel
	for i, m := range models {
		if sameModelName(name, m.Name) || sameModelName(name, m.Model) {
			found = &models[i]
			break
		}
	}
	if found == nil {
		return fmt.Errorf("couldn't find model %q to stop (ubatch ps lists the loaded ones)", name)
	}
	return sf.call(ctx, "/api/generate", map[string]any{"model": found.Name, "keep_alive": 0, "stream": false}, nil)
}

// sameModelName compares names as the server does: without case, ":latest" and ".gguf" implied.
func sameModelName(a, b string) bool {
	norm := func(s string) string { return hub.NormalizeName(strings.TrimSuffix(strings.ToLower(s), ".gguf")) }
	return norm(a) == norm(b)
}
