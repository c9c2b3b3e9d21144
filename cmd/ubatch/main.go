// Command ubatch is a local LLM inference server and toolbox built around token-level dynamic
// batching. Run `ubatch help` for the subcommands and `ubatch CMD -h` for each one's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "serve the model over HTTP (OpenAI-compatible and llama.cpp APIs)", cmdServe},
		{"route", "route requests over a fleet of serve nodes by cached prefix and load", cmdRoute},
		{"run", "generate text from a prompt, streaming it, with a performance summary", cmdRun},
		{"batched", "decode one prompt into N parallel sequences in shared batches", cmdBatched},
		{"bench", "measure throughput (llama-bench and llama-batched-bench style; `bench serve` for HTTP load)", cmdBench},
		{"logits", "write the logits of every prompt position as float32 (for correctness checks)", cmdLogits},
		{"tokenize", "print the token ids (and pieces) of a text", cmdTokenize},
		{"info", "print a GGUF file's metadata and tensors", cmdInfo},
		{"synth", "write a Llama GGUF with seeded random weights (benchmark models)", cmdSynth},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "ubatch: a CPU LLM inference server with continuous batching\n\nUsage: ubatch COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `ubatch COMMAND -h` for a command's flags. With no -m, the demo model stories260K.gguf is used.\n")
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
		case errors.Is(err, flag.ErrHelp):
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

// newFlags makes a FlagSet whose -h output explains the command.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ubatch %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}
