package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// llama.cpp's tools document many flags that ubatch has no use for (GPU offload, thread
// placement, mmap) or cannot honour (a draft model, LoRA). So that a llama-server, llama-cli or
// llama-bench command line runs as it is, every flag they document is taken here: the ones that
// change nothing on a CPU are accepted and named in a log line at start, the ones that would
// change the output in a way ubatch cannot follow are refused in one line, and the ones with an
// ubatch equivalent set it. The table is llamaFlagTable (llamaflags_table.go).

// llamaHow is what ubatch does with one of llama.cpp's flags.
type llamaHow int

const (
	ignored llamaHow = iota // accepted; a log line at start says why it has no effect
	refused                 // a one-line error: ubatch cannot give what it asks for
	mapped                  // sets ubatch's own flags (apply), or a command reads it
	aliased                 // another spelling of one of ubatch's own flags (note names it)
)

// llamaFlag is one of llama.cpp's flags (or a spelling of one).
type llamaFlag struct {
	spell   string   // llama.cpp's spellings as its --help lists them, "-ngl, --gpu-layers, --n-gpu-layers"
	arg     string   // the value's placeholder; "" for a switch
	cmds    string   // the commands that take it: s serve, r run, b batched, B bench
	how     llamaHow //
	note    string   // why (ignored, refused), what it does (mapped), or the flag it spells (aliased)
	keep    []string // refused: values that ask for nothing ubatch lacks (llama.cpp's "off"), taken as ignored
	choices []string // the values llama.cpp allows, when it lists them; others are an error
	apply   func(fs *pflag.FlagSet, v string) error
}

// names are the spellings without dashes, in the table's order.
func (f *llamaFlag) names() []string {
	var out []string
	for _, s := range strings.Split(f.spell, ",") {
		out = append(out, strings.TrimLeft(strings.TrimSpace(s), "-"))
	}
	return out
}

// name is the long name the flag is registered under: its first two-dash spelling.
func (f *llamaFlag) name() string {
	for _, s := range strings.Split(f.spell, ",") {
		if s = strings.TrimSpace(s); strings.HasPrefix(s, "--") {
			return s[2:]
		}
	}
	return f.names()[0]
}

// shorthand is the flag's one-letter spelling (-C, -e), if it has one.
func (f *llamaFlag) shorthand() string {
	for _, n := range f.names() {
		if len(n) == 1 {
			return n
		}
	}
	return ""
}

// first is the spelling users know best, the one llama.cpp lists first: log lines use it.
func (f *llamaFlag) first() string { return strings.TrimSpace(strings.Split(f.spell, ",")[0]) }

// aliases maps every other spelling of a flag, llama.cpp's short multi-letter ones above all, to
// the long name ubatch registers it under; it applies only where that name is registered.
var aliases = llamaAliases()

func llamaAliases() map[string]string {
	m := map[string]string{"ub": "ubatch-size", "np": "parallel", "ctk": "cache-type-k", "ctv": "cache-type-v"}
	for i := range llamaFlagTable {
		f := &llamaFlagTable[i]
		to := f.name()
		if f.how == aliased {
			to = f.note
		}
		for _, n := range f.names() {
			if n != to && (len(n) > 1 || f.how == aliased) {
				m[n] = to
			}
		}
	}
	return m
}

// llamaAnnotation marks the flags registered from the table, which --help lists apart.
const llamaAnnotation = "llama.cpp"

// commandLetter is the letter of llamaFlag.cmds for the command fs parses.
func commandLetter(name string) rune {
	switch name {
	case "serve":
		return 's'
	case "run":
		return 'r'
	case "batched":
		return 'b'
	case "bench":
		return 'B'
	}
	return 0
}

// llamaFlagsOf are the table's entries for the command fs parses that fs takes: the ones it
// registers and the spellings of its own flags. A flag the command defines itself under the same
// name wins (its real implementation), so the table never redefines one.
func llamaFlagsOf(fs *pflag.FlagSet) []*llamaFlag {
	c := commandLetter(fs.Name())
	own := map[string]bool{} // the command's own flags, by the names they were registered under
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Annotations[llamaAnnotation] == nil {
			own[fl.Name] = true
		}
	})
	var out []*llamaFlag
rows:
	for i := range llamaFlagTable {
		f := &llamaFlagTable[i]
		if c == 0 || !strings.ContainsRune(f.cmds, c) {
			continue
		}
		if f.how == aliased {
			if own[f.note] {
				out = append(out, f)
			}
			continue
		}
		for _, n := range f.names() {
			if len(n) > 1 && own[n] { // the command has it, maybe under another of its spellings
				continue rows
			}
		}
		out = append(out, f)
	}
	return out
}

// registered says whether fs has a flag registered under name itself (fs.Lookup would apply
// the aliases first).
func registered(fs *pflag.FlagSet, name string) bool {
	found := false
	fs.VisitAll(func(fl *pflag.Flag) { found = found || fl.Name == name })
	return found
}

// addLlamaFlags registers the command's llama.cpp flags on fs, hidden from the main list
// (--help lists them apart, see printLlamaFlags).
func addLlamaFlags(fs *pflag.FlagSet) {
	for _, f := range llamaFlagsOf(fs) {
		name := f.name()
		if f.how == aliased || fs.Lookup(name) != nil {
			continue
		}
		short := f.shorthand()
		if short != "" && fs.ShorthandLookup(short) != nil {
			short = "" // taken by one of ubatch's flags (serve's -v is its own --verbose)
		}
		if f.arg == "" {
			fs.BoolP(name, short, false, f.note)
		} else {
			fs.StringP(name, short, "", f.note)
		}
		fs.SetAnnotation(name, llamaAnnotation, []string{f.spell})
		fs.MarkHidden(name)
	}
}

// settleLlamaFlags acts on the llama.cpp flags given: it refuses the first one ubatch cannot
// honour, applies the mapped ones, and logs one line for each of the others.
func settleLlamaFlags(fs *pflag.FlagSet) error {
	var notes []string
	for _, f := range llamaFlagsOf(fs) {
		fl := fs.Lookup(f.name())
		if f.how == aliased || fl == nil || !fs.Changed(fl.Name) {
			continue
		}
		v := fl.Value.String()
		given := f.first()
		if f.arg != "" {
			given += " " + v
		} else if v == "false" {
			continue // --mlock=false asks for nothing
		}
		if len(f.choices) > 0 && !slices.Contains(f.choices, strings.ToLower(v)) {
			return fmt.Errorf("%s: use %s", given, strings.Join(f.choices, ", "))
		}
		switch {
		case f.how == refused && !slices.Contains(f.keep, strings.ToLower(v)):
			return fmt.Errorf("%s: %s", given, f.note)
		case f.how == mapped:
			if f.apply != nil {
				if err := f.apply(fs, v); errors.Is(err, pflag.ErrHelp) {
					return err
				} else if err != nil {
					return fmt.Errorf("%s: %w", given, err)
				}
			}
			notes = append(notes, given+": "+f.note)
		case f.how == refused:
			notes = append(notes, given+": asks for nothing ubatch does otherwise; ignored")
		default:
			notes = append(notes, given+": "+f.note)
		}
	}
	for _, n := range notes {
		slog.Info("llama.cpp flag: " + n)
	}
	return nil
}

// printLlamaFlags lists the command's llama.cpp flags after its own, compactly so that the
// command's own flags stay in view: each mapped flag on a line, then the other spellings of its
// flags, the ignored and the refused ones as wrapped lists of names (the log line or the error
// a flag gets says why).
func printLlamaFlags(w io.Writer, fs *pflag.FlagSet) {
	flags := llamaFlagsOf(fs)
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(w, "\nllama.cpp compatibility (its command lines run here as they are):\n")
	var same, ign, ref []string
	for _, f := range flags {
		switch f.how {
		case aliased:
			same = append(same, f.first()+"="+"--"+f.note)
		case mapped:
			left := f.spell
			if f.arg != "" {
				left += " " + f.arg
			}
			if len(left) > 30 {
				fmt.Fprintf(w, "  %s\n  %-30s  %s\n", left, "", f.note)
			} else {
				fmt.Fprintf(w, "  %-30s  %s\n", left, f.note)
			}
		case refused:
			ref = append(ref, f.first())
		default:
			ign = append(ign, f.first())
		}
	}
	for _, l := range []struct {
		title string
		names []string
	}{
		{"other spellings of its flags", same},
		{"ignored: no effect on a CPU, a log line at start says why", ign},
		{"refused: ubatch cannot do what they ask, a one-line error says why (their \"off\" value is ignored)", ref},
	} {
		if len(l.names) > 0 {
			fmt.Fprintf(w, "  %s:\n%s\n", l.title, wrapWords(l.names, "    "))
		}
	}
}

// setUnlessGiven sets ubatch's flag name to v unless the command line gives it: the llama.cpp
// spelling is the fallback, ubatch's own flag wins.
func setUnlessGiven(fs *pflag.FlagSet, name, v string) error {
	if fs.Lookup(name) == nil || fs.Changed(name) {
		return nil
	}
	return fs.Set(name, v)
}

// readAPIKeyFile is llama-server's --api-key-file: one key a line, # comments; ubatch checks
// one key, so the file must hold exactly one.
func readAPIKeyFile(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var keys []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	switch {
	case len(keys) != 1:
		return fmt.Errorf("%d keys in the file: ubatch checks one key (give one line, or --api-key KEY)", len(keys))
	case fs.Changed("api-key"):
		return fmt.Errorf("give --api-key or --api-key-file, not both")
	}
	return fs.Set("api-key", keys[0])
}

// hfModel is llama.cpp's -hf ORG/REPO[:QUANT]: ubatch's -m ORG/REPO[:QUANT], which the hub
// package finds in the library or pulls (the quant's file, from the Hub's file list); with
// -hff FILE it is -m hf://ORG/REPO/FILE.
func hfModel(fs *pflag.FlagSet, repo string) error {
	file, _ := fs.GetString("hf-file")
	if fs.Changed("model") {
		return fmt.Errorf("give -m or -hf, not both")
	}
	if file == "" {
		return fs.Set("model", strings.Trim(repo, "/"))
	}
	repo, _, _ = strings.Cut(repo, ":")
	return fs.Set("model", "hf://"+strings.Trim(repo, "/")+"/"+file)
}

// needHFRepo refuses -hff without -hf, which would otherwise be dropped without a word.
func needHFRepo(fs *pflag.FlagSet, _ string) error {
	if !fs.Changed("hf-repo") {
		return fmt.Errorf("give the repository too: -hf ORG/REPO (or -m hf://ORG/REPO/FILE.gguf)")
	}
	return nil
}

// unescapePrompt is llama-cli's -e: \n, \r, \t, \', \", \\ in -p become the characters.
func unescapePrompt(fs *pflag.FlagSet, _ string) error {
	p, err := fs.GetString("prompt")
	if err != nil {
		return nil
	}
	r := strings.NewReplacer(`\n`, "\n", `\r`, "\r", `\t`, "\t", `\'`, "'", `\"`, `"`, `\\`, `\`)
	return fs.Set("prompt", r.Replace(p))
}
