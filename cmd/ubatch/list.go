package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"ubatch/hub"
	"ubatch/internal/demo"
)

// cmdList is `ubatch list`: the library's models with what their GGUF headers say.
func cmdList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("list", "list", stderr)
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ubatch list: unexpected arguments %v (it takes none)\n", fs.Args())
		return errUsage
	}
	models, err := hub.List(hub.Options{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tFAMILY\tQUANT\tPATH")
	if len(models) == 0 {
		// What serve serves then: the demo model, under the name serve gives it.
		path, err := hub.Resolve(ctx, "", hub.Options{})
		if err != nil {
			return err
		}
		m := hub.Model{Name: demo.Name, Path: path}
		if st, err := os.Stat(path); err == nil {
			m.Size = st.Size()
		}
		models = append(models, m)
		defer fmt.Fprintln(stderr, "the library is empty: ubatch serve serves the demo model above; add models with ubatch pull ORG/REPO:QUANT (e.g. ubatch pull Qwen/Qwen3-0.6B-GGUF:Q4_K_M) or ubatch create NAME -f FILE.gguf")
	}
	for _, m := range models {
		family, qt := "?", "?"
		if m.Problem == "" {
			if f, q, err := hub.Describe(m.Path); err == nil {
				family, qt = f, q
			} else {
				m.Problem = err.Error()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, humanSize(m.Size), family, qt, m.Path)
		if m.Problem != "" {
			defer fmt.Fprintf(stderr, "%s: %s\n", m.Name, m.Problem) // after the table
		}
	}
	return tw.Flush()
}

// cmdRm is `ubatch rm NAME...`: each model's file and manifest out of the library.
func cmdRm(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rm", "rm NAME ...", stderr)
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "ubatch rm: name a model (see ubatch list)\n")
		return errUsage
	}
	for _, name := range fs.Args() {
		m, err := hub.Remove(name, hub.Options{})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", m.Name, m.Path)
	}
	return nil
}
