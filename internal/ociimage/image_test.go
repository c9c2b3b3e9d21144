package ociimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildRefuses: what is not a static Linux executable is refused with what to do, and so
// is a tag that is not an image name.
func TestBuildRefuses(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, binary, tag, want string
	}{
		{name: "not elf", binary: text, want: "not an ELF executable"},
		{name: "missing", binary: filepath.Join(dir, "nope"), want: "reading the binary"},
		{name: "bad tag", binary: text, tag: "Not A Tag!", want: "--tag"},
	}
	// /bin/sh is dynamically linked on every Linux this runs on that has one.
	if _, err := os.Stat("/bin/sh"); err == nil {
		tests = append(tests, struct{ name, binary, tag, want string }{name: "dynamic", binary: "/bin/sh", want: "CGO_ENABLED=0"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Build(Options{Binary: tc.binary, Tag: tc.tag})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build(%s): %v, want an error saying %q", tc.binary, err, tc.want)
			}
		})
	}
}

// TestDockerfileAgrees: the repository's Dockerfile (for those with Docker; not built here)
// states the user, port, volume, entrypoint and command this package writes.
func TestDockerfileAgrees(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	tests := []struct{ name, line string }{
		{name: "user", line: "USER 65532:65532"},
		{name: "port", line: "EXPOSE " + strings.TrimSuffix(Port, "/tcp")},
		{name: "volume", line: "VOLUME " + DataDir},
		{name: "entrypoint", line: `ENTRYPOINT ["` + BinaryPath + `"]`},
		{name: "cmd", line: `CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]`},
		{name: "home", line: "UBATCH_HOME=" + DataDir},
		{name: "static", line: "CGO_ENABLED=0 go build"},
		{name: "certs", line: CACerts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(df, tc.line) {
				t.Fatalf("the Dockerfile lacks %q", tc.line)
			}
		})
	}
}
