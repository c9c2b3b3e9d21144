package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"ubatch/chat"
	"ubatch/gguf"
	"ubatch/internal/demo"
	"ubatch/server"
)

// cmdShow is `ubatch show NAME`: what Ollama's show prints of a model, from its GGUF header
// (metadata and tensor table; the weights are not read, nothing is loaded).
func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("show", "show [NAME] [--template | --modelfile | --license]", stderr)
	tmplOnly := fs.Bool("template", false, "print the chat template (Jinja, as the GGUF holds it) only")
	modelfile := fs.Bool("modelfile", false, "print a Modelfile that creates this model (ubatch create NAME -f it)")
	license := fs.Bool("license", false, "print the model's licence (general.license) only")
	if err := parsePositional(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "ubatch show: name one model (see ubatch list)\n")
		return errUsage
	}
	arg := fs.Arg(0)
	if _, err := os.Stat(arg); err != nil && strings.EqualFold(arg, demo.Name) {
		arg = "" // the demo model, by the name serve gives it
	}
	f, path, err := openGGUF(ctx, arg)
	if err != nil {
		return err
	}
	defer f.Close()
	tmpl, _ := f.String("tokenizer.chat_template")
	lic, _ := f.String("general.license")
	switch {
	case *tmplOnly:
		fmt.Fprintln(stdout, tmpl)
		return nil
	case *modelfile:
		fmt.Fprintf(stdout, "# Modelfile of %s\nFROM %s\n", path, path)
		return nil
	case *license:
		fmt.Fprintln(stdout, lic)
		return nil
	}
	printShow(stdout, f, tmpl, lic)
	return nil
}

// printShow prints Ollama's show sections: Model, Capabilities, License.
func printShow(w io.Writer, f *gguf.File, tmpl, lic string) {
	arch := f.Architecture()
	params, level := server.DescribeWeights(f.Tensors)
	tw := tabwriter.NewWriter(w, 0, 4, 4, ' ', 0)
	fmt.Fprintln(tw, "  Model")
	fmt.Fprintf(tw, "    architecture\t%s\n", arch)
	fmt.Fprintf(tw, "    parameters\t%s\n", params)
	for _, kv := range []struct{ label, key string }{{"context length", "context_length"}, {"embedding length", "embedding_length"}} {
		if v, ok := f.Uint(arch + "." + kv.key); ok {
			fmt.Fprintf(tw, "    %s\t%d\n", kv.label, v)
		}
	}
	fmt.Fprintf(tw, "    quantization\t%s\n", level)
	tw.Flush()
	fmt.Fprintln(w, "\n  Capabilities")
	for _, c := range capabilities(f, tmpl) {
		fmt.Fprintf(w, "    %s\n", c)
	}
	if lic != "" {
		fmt.Fprintf(w, "\n  License\n    %s\n", strings.ReplaceAll(strings.TrimSpace(lic), "\n", "\n    "))
	}
	fmt.Fprintln(w)
}

// capabilities are Ollama's capability names the file's metadata shows, as /api/show tests
// them: a template that renders tools, a thinking template, fill-in-the-middle tokens.
func capabilities(f *gguf.File, tmpl string) []string {
	caps := []string{"completion"}
	if strings.Contains(tmpl, "tools") {
		caps = append(caps, "tools")
	}
	if chat.DetectReasoningFormat(tmpl) != chat.ReasoningNone {
		caps = append(caps, "thinking")
	}
	if _, ok := f.Uint("tokenizer.ggml.fim_pre_token_id"); ok {
		caps = append(caps, "insert")
	}
	return caps
}
