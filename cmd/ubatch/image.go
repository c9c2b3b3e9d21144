package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"ubatch/internal/ociimage"
)

// cmdImage writes a container image of a static ubatch binary (by default this one) as a
// tarball, without a Docker daemon: see internal/ociimage for its layout.
func cmdImage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("image", "image -o ubatch.tar [--binary PATH] [--tag NAME:TAG]", stderr)
	out := fs.StringP("output", "o", "ubatch.tar", "the image tarball to write (docker load -i, podman load -i, skopeo copy docker-archive:...)")
	bin := fs.String("binary", "", "a static Linux ubatch binary, built with CGO_ENABLED=0 (default: this executable)")
	tag := fs.String("tag", "ubatch:latest", "the image's name and tag in the tarball")
	certs := fs.String("ca-certs", ociimage.CACerts, "the CA bundle copied into the image so pull reaches Hugging Face over HTTPS (none if the file is missing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *bin == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this executable: %w; pass --binary", err)
		}
		*bin = self
	}
	if err := ociimage.Write(ociimage.Options{Binary: *bin, Tag: *tag, CACerts: *certs}, *out); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s, %.1f MiB (user %d, port %s, volume %s)\n", *out, *tag, float64(st.Size())/(1<<20), ociimage.UID, ociimage.Port, ociimage.DataDir)
	return nil
}
