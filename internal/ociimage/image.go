// Package ociimage writes a container image of a static ubatch binary without a Docker daemon or
// a registry: one layer built from scratch (the binary, /etc/passwd and /etc/group with a
// non-root user, /tmp, the data volume's directory and, when the host has them, its CA
// certificates), written as a `docker save` tarball that docker load, podman load, skopeo
// (docker-archive:) and crane push read.
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's layout and user.
const (
	BinaryPath = "/usr/local/bin/ubatch"
	DataDir    = "/data" // $UBATCH_HOME, a VOLUME: the model library and --kv-disk
	UID        = 65532   // "nonroot", as distroless images number it
	Port       = "8080/tcp"
	// CACerts is where the image keeps the host's CA bundle, a path Go's crypto/x509 reads on
	// Linux, so that pull reaches Hugging Face over HTTPS.
	CACerts = "/etc/ssl/certs/ca-certificates.crt"
)

// Options say what to build. Binary is required; the others have defaults.
type Options struct {
	Binary  string // a static Linux ELF executable (CGO_ENABLED=0): refused otherwise
	Tag     string // the image's name in the tarball (default ubatch:latest)
	CACerts string // the host's CA bundle (default /etc/ssl/certs/ca-certificates.crt; absent: none)
}

// Write builds the image of o.Binary and writes it as a tarball to out.
func Write(o Options, out string) error {
	img, tag, err := Build(o)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// Build returns the image and its tag.
func Build(o Options) (v1.Image, name.Tag, error) {
	if o.Tag == "" {
		o.Tag = "ubatch:latest"
	}
	if o.CACerts == "" {
		o.CACerts = CACerts
	}
	tag, err := name.NewTag(o.Tag)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("--tag %q: %w (want NAME[:TAG], e.g. ubatch:0.1)", o.Tag, err)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("reading the binary: %w", err)
	}
	arch, err := staticArch(bin)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: %w", o.Binary, err)
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, name.Tag{}, fmt.Errorf("reading the CA certificates: %w", err)
	}
	layerTar, err := rootFS(bin, certs)
	if err != nil {
		return nil, name.Tag{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, name.Tag{}, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, name.Tag{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, name.Tag{}, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		ExposedPorts: map[string]struct{}{Port: {}},
		Volumes:      map[string]struct{}{DataDir: {}},
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "UBATCH_HOME=" + DataDir, "HOME=/home/nonroot"},
		WorkingDir:   "/home/nonroot",
		// The entrypoint is the binary, so that `docker run IMAGE pull NAME` runs another
		// command; without arguments it serves on every interface.
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"serve", "--host", "0.0.0.0", "--port", "8080"},
		Labels:     map[string]string{"org.opencontainers.image.title": "ubatch"},
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, name.Tag{}, err
	}
	return img, tag, nil
}

// staticArch checks that b is a Linux ELF executable without an interpreter (statically
// linked) and returns its GOARCH.
func staticArch(b []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable (%v): build it for Linux, GOOS=linux CGO_ENABLED=0 go build ./cmd/ubatch", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked: the image has no C library; build with CGO_ENABLED=0 go build ./cmd/ubatch")
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	}
	return "", fmt.Errorf("ELF machine %v is not an architecture Go builds ubatch for", f.Machine)
}

// rootFS is the layer's tar: directories first, every entry owned by root except the
// non-root user's home and the data directory, every time the Unix epoch so that the same
// binary gives the same layer digest.
func rootFS(bin, certs []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(path string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: epoch})
	}
	file := func(path string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, UID) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir(DataDir[1:], 0o755, UID) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(BinaryPath[1:], 0o755, bin) },
	}
	if certs != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file(CACerts[1:], 0o644, certs) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("writing the layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}
