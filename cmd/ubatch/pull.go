package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"

	"ubatch/hub"
)

// cmdPull is `ubatch pull ORG/REPO[:QUANT] | hf://ORG/REPO/FILE.gguf ...`: the models into the
// library ($UBATCH_HOME/models), each under a short name that -m then takes.
func cmdPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", "pull ORG/REPO[:QUANT] | hf://ORG/REPO/FILE.gguf ...", stderr)
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "ubatch pull: name a model, e.g. ubatch pull Qwen/Qwen3-0.6B-GGUF:Q4_K_M (see ubatch pull --help)\n")
		return errUsage
	}
	for _, arg := range fs.Args() {
		m, note, err := hub.Pull(ctx, arg, hub.Options{Progress: progressFor(stderr, "pull"), Logger: slog.Default()})
		if note != "" {
			fmt.Fprintln(stderr, note)
		}
		if err != nil {
			return pullHint(err)
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", m.Name, humanSize(m.Size), m.Path)
	}
	return nil
}

// pullHint says what to do about a failed pull: a network that does not reach the Hub is not a
// token's business (an offline machine was told to set HF_TOKEN).
func pullHint(err error) error {
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (the Hub cannot be reached: check the network, or set HF_ENDPOINT for a mirror; models already pulled still serve: ubatch list)", err)
	}
	return fmt.Errorf("%w (set HF_TOKEN for a gated or private repository, HF_ENDPOINT for a mirror)", err)
}

// parsePositional parses flags for the library commands, which take names rather than flags:
// unlike parse, it keeps the positional arguments for the caller.
func parsePositional(fs *pflag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, pflag.ErrHelp):
		usage()
		return err
	case err != nil:
		return flagError(fs, err)
	}
	if v, _ := fs.GetBool("version"); v {
		fmt.Fprintln(fs.Output(), versionText())
		return pflag.ErrHelp
	}
	return nil
}

// progressFor draws a progress bar when w is a terminal, and otherwise (a log file, a CI job)
// prints a plain line every 10% or 10 s, so a captured log is not one line of carriage returns.
func progressFor(w io.Writer, label string) func(done, total int64) {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return hub.ProgressPrinter(w, label)
		}
	}
	return progressLines(w, label)
}

// progressLines is progressFor's plain form.
func progressLines(w io.Writer, label string) func(done, total int64) {
	lastPct, last, finished := -1, time.Now(), false
	return func(done, total int64) {
		pct := -1
		if total > 0 {
			pct = int(done * 100 / total)
		}
		end := total > 0 && done >= total
		if finished || (!end && pct/10 <= lastPct/10 && time.Since(last) < 10*time.Second) {
			return
		}
		lastPct, last, finished = pct, time.Now(), end
		if total > 0 {
			fmt.Fprintf(w, "%s: %s of %s (%d%%)\n", label, humanSize(done), humanSize(total), pct)
		} else {
			fmt.Fprintf(w, "%s: %s\n", label, humanSize(done))
		}
	}
}

// humanSize is n bytes in MiB or GiB, as ubatch list prints sizes.
func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}
