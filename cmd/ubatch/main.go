// Command ubatch is a local LLM inference server and toolbox built around token-level dynamic
// batching. Run `ubatch help` for the subcommands and `ubatch CMD -h` for each one's flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "serve the model over HTTP (OpenAI-compatible and llama.cpp APIs)", cmdServe},
		{"route", "route requests over a fleet of serve nodes by cached prefix and load", cmdRoute},
		{"run", "chat with a model in the terminal, or with -p generate from a prompt with a performance summary", cmdRun},
		{"batched", "decode one prompt into N parallel sequences in shared batches", cmdBatched},
		{"bench", "measure throughput (llama-bench and llama-batched-bench style; `bench serve` for HTTP load)", cmdBench},
		{"logits", "write the logits of every prompt position as float32 (for correctness checks)", cmdLogits},
		{"tokenize", "print the token ids (and pieces) of a text", cmdTokenize},
		{"info", "print a GGUF file's metadata and tensors", cmdInfo},
		{"pull", "download a model into the library: ORG/REPO[:QUANT] or hf://ORG/REPO/FILE.gguf", cmdPull},
		{"list", "list the library's models (name, size, family, quant, path)", cmdList},
		{"rm", "remove a model from the library", cmdRm},
		{"create", "add a local GGUF to the library: create NAME -f FILE.gguf (or a Modelfile with FROM)", cmdCreate},
		{"show", "print a model's architecture, parameters, context, quantization, capabilities (from its header)", cmdShow},
		{"ps", "list the models a running server has loaded (its /api/ps)", cmdPs},
		{"stop", "unload a model of a running server now", cmdStop},
		{"image", "write a container image of this static binary as a tarball, without Docker (image -o ubatch.tar)", cmdImage},
		{"synth", "write a GGUF of any supported family (--arch) with seeded random weights", cmdSynth},
		{"version", "print the version (also ubatch --version)", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "ubatch: a CPU LLM inference server with continuous batching\n\nUsage: ubatch COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `ubatch COMMAND -h` for a command's flags. With no -m, the demo model stories260K.gguf is used;\n-m takes a path, a library name (ubatch list), ORG/REPO[:QUANT] (pulled if missing) or hf://ORG/REPO/FILE.gguf.\n")
}

func main() {
	os.Exit(mainCode(os.Args[1:], os.Stdout, os.Stderr))
}

func mainCode(args []string, stdout, stderr io.Writer) int {
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	if args[0] == "--version" {
		args[0] = "version"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, pflag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "ubatch %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "ubatch: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// errUsage marks errors already reported by the flag package.
var errUsage = errors.New("usage")

// version is the program's version, printed by --version.
const version = "ubatch 0.3 (continuous-batching CPU inference server)"

// versionText is version with what the build records: the commit (as llama.cpp's --version
// prints its build) and the Go toolchain.
func versionText() string {
	s := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" {
				s += "\ncommit " + kv.Value
			}
		}
		s += "\nbuilt with " + bi.GoVersion
	}
	return s
}

// cmdVersion is `ubatch version` and `ubatch --version`.
func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "ubatch version: unexpected arguments %v (it takes none)\n", args)
		return errUsage
	}
	fmt.Fprintln(stdout, versionText())
	return nil
}

// newFlags makes a FlagSet (spf13/pflag) whose -h output explains the command. Flags take
// llama.cpp's names: a one-letter shorthand with one dash (-c, -n, -t, -m, -p), long names with
// two, and llama.cpp's multi-letter single-dash forms (-np, -ub, -npp) are accepted too.
func newFlags(name, synopsis string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ubatch %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		printLlamaFlags(stderr, fs)
	}
	fs.Bool("version", false, "print the version and exit")
	return fs
}

// parse parses args and runs checks on the values (before any model is loaded); a wrong flag or
// value gets one line saying so and where the help is, not the whole flag list. The command's
// llama.cpp flags (llamaflags.go) are registered here, after the command's own, so that one the
// command implements itself is never redefined; they are settled before the checks, so that a
// mapped one (-tb) is checked as the flag it sets.
func parse(fs *pflag.FlagSet, args []string, checks ...func() error) error {
	addLlamaFlags(fs)
	// The aliases apply from now on, once every flag is registered: a command's own flag with a
	// name llama.cpp spells otherwise (an alias key) is its own, never renamed onto another.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, n string) pflag.NormalizedName {
		if to, ok := aliases[n]; ok && !registered(fs, n) && registered(fs, to) {
			return pflag.NormalizedName(to)
		}
		return pflag.NormalizedName(n)
	})
	checks = append([]func() error{func() error { return settleLlamaFlags(fs) }}, checks...)
	if err := parsePositional(fs, llamaArgs(fs, args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "ubatch %s: unexpected arguments %v (see ubatch %s --help)\n", fs.Name(), fs.Args(), fs.Name())
		return errUsage
	}
	for _, check := range checks {
		if err := check(); errors.Is(err, pflag.ErrHelp) { // a flag that prints and exits (--list-devices)
			return err
		} else if err != nil {
			return flagError(fs, err)
		}
	}
	return nil
}

// flagError reports a wrong flag value found after parse in one line, naming the help, and
// returns errUsage (exit status 2): the whole flag list would bury the one line that matters.
func flagError(fs *pflag.FlagSet, err error) error {
	fmt.Fprintf(fs.Output(), "ubatch %s: %v (see ubatch %s --help)\n", fs.Name(), err, fs.Name())
	return errUsage
}

// mustBePositive refuses the first of the named int or duration flags that is not positive.
func mustBePositive(fs *pflag.FlagSet, names ...string) error {
	for _, name := range names {
		v := fs.Lookup(name).Value.String()
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			d, _ := time.ParseDuration(v)
			n = int64(d)
		}
		if n <= 0 {
			return fmt.Errorf("--%s %s: must be positive", name, v)
		}
	}
	return nil
}

// atLeast checks that flag's value v is at least lo.
func atLeast(flag string, v, lo int) error {
	if v < lo {
		return fmt.Errorf("%s %d: must be at least %d", flag, v, lo)
	}
	return nil
}

// llamaArgs rewrites llama.cpp's single-dash long flags (-ngl 99, -np 4, -ub=64, -kv-type f32)
// to the double-dash form pflag parses (which would read -ngl as -n gl), and a one-letter
// spelling the command has as a long flag only (serve's -a, --alias); the other one-letter
// shorthands and negative numbers are left alone. The names are the aliases table's, which
// the FlagSet's normalisation maps onto the flags.
func llamaArgs(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--usage" { // llama.cpp's other spelling of --help
			a = "--help"
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) >= 2 && a[0] == '-' && a[1] != '-' {
			to, ok := aliases[name]
			if !ok {
				to = name
			}
			switch {
			case len(name) > 1 && (registered(fs, name) || registered(fs, to)):
				a = "-" + a
			case len(name) == 1 && ok && fs.ShorthandLookup(name) == nil && registered(fs, to):
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
