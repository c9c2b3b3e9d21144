package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// flagGroup is one section of a command's --help: a title and the long names of its flags, in
// the order listed. A name the command does not register is skipped.
type flagGroup struct {
	title string
	flags []string
}

// otherFlags titles the section of the flags no group names, so that a flag added without a
// group still shows (TestServeHelpGroups fails until it has one).
const otherFlags = "Other flags"

// helpWidth is the column --help wraps its lists of names at.
const helpWidth = 100

// setHelpGroups makes fs's --help list its flags in groups, after the synopsis and before the
// intro text (extra, may be empty) and the command's llama.cpp flags.
func setHelpGroups(fs *pflag.FlagSet, synopsis, extra string, groups []flagGroup, w io.Writer) {
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: ubatch %s\n", synopsis)
		printFlagGroups(w, fs, groups)
		if extra != "" {
			fmt.Fprintf(w, "\n%s\n", extra)
		}
		printLlamaFlags(w, fs)
	}
}

// sortFlags sorts fs's visible flags into groups: each group's flags in its order, then the
// flags no group names under otherFlags, in registration order. Empty groups are dropped.
func sortFlags(fs *pflag.FlagSet, groups []flagGroup) ([]string, [][]*pflag.Flag) {
	var titles []string
	var lists [][]*pflag.Flag
	named := map[string]bool{}
	for _, g := range groups {
		var list []*pflag.Flag
		for _, n := range g.flags {
			named[n] = true
			if f := fs.Lookup(n); f != nil && f.Name == n && !f.Hidden {
				list = append(list, f)
			}
		}
		if len(list) > 0 {
			titles, lists = append(titles, g.title), append(lists, list)
		}
	}
	var rest []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !named[f.Name] && !f.Hidden {
			rest = append(rest, f)
		}
	})
	if len(rest) > 0 {
		titles, lists = append(titles, otherFlags), append(lists, rest)
	}
	return titles, lists
}

// printFlagGroups prints fs's flags under the groups' titles, one line per flag: its spellings
// (llama.cpp's single-dash one too, -np), its value's placeholder, its usage and its default
// when that is not the zero value.
func printFlagGroups(w io.Writer, fs *pflag.FlagSet, groups []flagGroup) {
	titles, lists := sortFlags(fs, groups)
	col := 0
	for _, list := range lists {
		for _, f := range list {
			col = max(col, len(flagLeft(f)))
		}
	}
	col = min(col, 32)
	for i, list := range lists {
		fmt.Fprintf(w, "\n%s:\n", titles[i])
		for _, f := range list {
			left, right := flagLeft(f), flagRight(f)
			if len(left) > col {
				fmt.Fprintf(w, "  %s\n  %-*s  %s\n", left, col, "", right)
			} else {
				fmt.Fprintf(w, "  %-*s  %s\n", col, left, right)
			}
		}
	}
}

// flagLeft is a flag's spellings and placeholder: "-m, --model string", "-np, --parallel int".
func flagLeft(f *pflag.Flag) string {
	var names []string
	if f.Shorthand != "" {
		names = append(names, "-"+f.Shorthand)
	}
	for _, a := range llamaShortSpellings(f.Name) {
		names = append(names, "-"+a)
	}
	names = append(names, "--"+f.Name)
	s := strings.Join(names, ", ")
	if varname, _ := pflag.UnquoteUsage(f); varname != "" && f.Value.Type() != "bool" {
		s += " " + varname
	}
	return s
}

// llamaShortSpellings are llama.cpp's multi-letter single-dash names of the flag (np for
// parallel), which llamaArgs accepts.
func llamaShortSpellings(name string) []string {
	var out []string
	for a, to := range aliases {
		if to == name && len(a) <= 3 && !strings.Contains(a, "-") {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// flagRight is a flag's usage, with its default unless that is the zero value or the usage
// already says what the default is.
func flagRight(f *pflag.Flag) string {
	_, usage := pflag.UnquoteUsage(f)
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return usage
	}
	if strings.Contains(usage, "(default") {
		return usage
	}
	if f.Value.Type() == "string" {
		return fmt.Sprintf("%s (default %q)", usage, f.DefValue)
	}
	return fmt.Sprintf("%s (default %s)", usage, f.DefValue)
}

// wrapWords joins words with spaces into lines of at most helpWidth columns, each after indent.
func wrapWords(words []string, indent string) string {
	var b strings.Builder
	n := 0
	for _, wd := range words {
		if n > 0 && n+1+len(wd) > helpWidth {
			b.WriteString("\n")
			n = 0
		}
		if n == 0 {
			b.WriteString(indent)
			n = len(indent)
		} else {
			b.WriteString(" ")
			n++
		}
		b.WriteString(wd)
		n += len(wd)
	}
	return b.String()
}
