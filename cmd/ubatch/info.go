package main

import (
	"context"
	"fmt"
	"io"
)

func cmdInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", "info [-m MODEL] [--tensors] [--kernels PATH]", stderr)
	path := fs.StringP("model", "m", "", "GGUF file (default: the demo model)")
	tensors := fs.Bool("tensors", false, "list every tensor")
	kernels := kernelsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	restoreKernels, err := useKernels(*kernels)
	if err != nil {
		return err
	}
	defer restoreKernels()
	f, p, err := openGGUF(ctx, *path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(stdout, "file: %s\nGGUF version %d, %d metadata keys, %d tensors, alignment %d\n\n", p, f.Version, len(f.Metadata), len(f.Tensors), f.Alignment)
	for _, kv := range f.Metadata {
		fmt.Fprintf(stdout, "%-45s %s\n", kv.Key, summarize(kv.Value))
	}
	var total uint64
	counts := map[string]int{}
	for _, t := range f.Tensors {
		total += t.Size
		counts[t.Type.String()]++
		if *tensors {
			fmt.Fprintf(stdout, "%-32s %-5s %v\n", t.Name, t.Type, t.Dims)
		}
	}
	fmt.Fprintf(stdout, "\ntensor data: %.2f MiB; types: %v\n%s\n", float64(total)/(1<<20), counts, fileKernels(f))
	if a := f.Architecture(); a != "" {
		if n, ok := f.Int(a + ".expert_count"); ok {
			used, _ := f.Int(a + ".expert_used_count")
			ffn, _ := f.Int(a + ".expert_feed_forward_length")
			fmt.Fprintf(stdout, "experts: %d per layer, %d used per token, FFN %d each\n", n, used, ffn)
		}
	}
	return nil
}

// summarize prints a metadata value, eliding long arrays and strings.
func summarize(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 80 {
			return fmt.Sprintf("%q... (%d bytes)", x[:77], len(x))
		}
		return fmt.Sprintf("%q", x)
	case []string:
		if len(x) > 6 {
			return fmt.Sprintf("%q ... (%d strings)", x[:6], len(x))
		}
		return fmt.Sprintf("%q", x)
	}
	s := fmt.Sprint(v)
	if len(s) > 100 {
		s = s[:97] + "..."
	}
	return s
}
