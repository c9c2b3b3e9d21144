package deploy

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"ubatch/internal/ociimage"
)

// TestImage builds the image with the real `ubatch image` (twice: the same bytes), reads the tarball back with
// go-containerregistry, checks its config (user, port, volume, entrypoint, environment) and its
// one layer (the binary byte for byte, the users, /tmp, /data), then runs the binary taken out
// of the layer: it serves /health and the vLLM metrics on loopback.
func TestImage(t *testing.T) {
	statSources("..")
	dir := t.TempDir()
	out := filepath.Join(dir, "ubatch.tar")
	cmd := exec.Command(ubatchBin, "image", "-o", out, "--tag", "ubatch:test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ubatch image: %v\n%s", err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	// Every time in the layer is the epoch and the config has no creation time, so the same
	// binary gives the same bytes (and image digest).
	again := filepath.Join(dir, "again.tar")
	if b, err := exec.Command(ubatchBin, "image", "-o", again, "--tag", "ubatch:test").CombinedOutput(); err != nil {
		t.Fatalf("ubatch image again: %v\n%s", err, b)
	}
	if a, b := readFile(t, out), readFile(t, again); !bytes.Equal(a, b) {
		t.Error("two images of the same binary differ")
	}
	t.Logf("image tarball: %.1f MiB", float64(st.Size())/(1<<20))
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatalf("reading the tarball back: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	checks := []struct {
		name string
		ok   bool
	}{
		{name: "os/arch", ok: cf.OS == "linux" && cf.Architecture == runtime.GOARCH},
		{name: "user", ok: c.User == "65532:65532"},
		{name: "port", ok: len(c.ExposedPorts) == 1 && hasKey(c.ExposedPorts, "8080/tcp")},
		{name: "volume", ok: len(c.Volumes) == 1 && hasKey(c.Volumes, "/data")},
		{name: "entrypoint", ok: slices.Equal(c.Entrypoint, []string{"/usr/local/bin/ubatch"})},
		{name: "cmd", ok: slices.Equal(c.Cmd, []string{"serve", "--host", "0.0.0.0", "--port", "8080"})},
		{name: "env", ok: slices.Contains(c.Env, "UBATCH_HOME=/data")},
	}
	for _, tc := range checks {
		if !tc.ok {
			t.Errorf("config %s: %+v (os %s arch %s)", tc.name, c, cf.OS, cf.Architecture)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	var bin, passwd []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		files[h.Name] = h
		switch h.Name {
		case "usr/local/bin/ubatch":
			bin, _ = io.ReadAll(tr)
		case "etc/passwd":
			passwd, _ = io.ReadAll(tr)
		}
	}
	want, err := os.ReadFile(ubatchBin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bin, want) || files["usr/local/bin/ubatch"].Mode&0o111 == 0 {
		t.Fatalf("the layer's usr/local/bin/ubatch (%d bytes) is not the executable built (%d bytes)", len(bin), len(want))
	}
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no user 65532:\n%s", passwd)
	}
	if h := files["tmp/"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("tmp/ missing or not 1777: %+v", h)
	}
	if h := files["data/"]; h == nil || h.Uid != ociimage.UID {
		t.Errorf("data/ missing or not owned by %d: %+v", ociimage.UID, h)
	}
	if _, err := os.Stat(ociimage.CACerts); err == nil && files[ociimage.CACerts[1:]] == nil {
		t.Errorf("the host has %s but the image does not", ociimage.CACerts)
	}

	// The image's binary, run as its entrypoint would be (on loopback, its home in a temp dir).
	extracted := filepath.Join(dir, "ubatch-from-image")
	if err := os.WriteFile(extracted, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(freePort(t))
	p := startProc(t, "image-serve", "env", "UBATCH_HOME="+filepath.Join(dir, "home"), extracted, "serve", "--host", "127.0.0.1", "--port", port)
	base := "http://127.0.0.1:" + port
	waitHTTP(t, p, base+"/health", `"ok"`, 60*time.Second)
	waitHTTP(t, p, base+"/metrics", "vllm:num_requests_waiting", 10*time.Second)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hasKey(m map[string]struct{}, k string) bool { _, ok := m[k]; return ok }
