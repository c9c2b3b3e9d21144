package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// helpSections splits a --help text into its sections: the title lines ending in ":" at the
// start of a line, and the lines under each.
func helpSections(help string) (titles []string, body map[string]string) {
	body = map[string]string{}
	cur := ""
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, ":") && line != "" && line[0] != ' ' {
			cur = strings.TrimSuffix(line, ":")
			titles = append(titles, cur)
			continue
		}
		body[cur] += line + "\n"
	}
	return titles, body
}

// TestServeHelpGroups: serve's --help lists the basics first, every flag in a group of
// serveHelpGroups (a flag added without one shows under otherFlags and fails here), and no
// group names a flag serve does not have.
func TestServeHelpGroups(t *testing.T) {
	code, out, help := ubatch(t, "serve", "-h")
	if code != 0 || out != "" {
		t.Fatalf("serve -h: exit %d, stdout %q", code, out)
	}
	titles, body := helpSections(help)
	if len(titles) == 0 || titles[0] != "Basics" {
		t.Fatalf("the first section is not Basics: %q", titles)
	}
	for _, name := range []string{"-m, --model", "--host", "--port", "-c, --ctx-size", "-t, --threads", "-np, --parallel"} {
		if !strings.Contains(body["Basics"], "  "+name+" ") {
			t.Errorf("Basics does not list %s:\n%s", name, body["Basics"])
		}
	}
	if other, ok := body[otherFlags]; ok {
		t.Errorf("flags in no group of serveHelpGroups (help_serve.go): give each one a group:\n%s", other)
	}
	if strings.Contains(strings.SplitN(help, "\n", 2)[0], "-np 16") {
		t.Errorf("the usage line gives -np a default it does not have: %s", strings.SplitN(help, "\n", 2)[0])
	}
	// A flag lists its default as it is: -np's is adaptive (0: up to autoParallel).
	if !strings.Contains(body["Basics"], "0 = up to 64") {
		t.Errorf("-np's help does not say its default:\n%s", body["Basics"])
	}
	fs := newFlags("serve", "serve", &bytes.Buffer{})
	var o serveOpts
	o.register(fs)
	for _, g := range serveHelpGroups {
		for _, n := range g.flags {
			if fs.Lookup(n) == nil {
				t.Errorf("group %q names --%s, which serve does not have", g.title, n)
			}
		}
	}
}

// TestSortFlagsCatchesUngrouped: a flag no group names is listed under otherFlags, so it is
// never left out of the help.
func TestSortFlagsCatchesUngrouped(t *testing.T) {
	tests := []struct {
		name   string
		groups []flagGroup
		want   string // titles and their flags
	}{
		{"all grouped", []flagGroup{{"A", []string{"port", "host"}}, {"B", []string{"new-limit", "version"}}},
			"A: port host; B: new-limit version"},
		{"one left out", []flagGroup{{"A", []string{"port", "host"}}}, "A: port host; Other flags: version new-limit"},
		{"unknown names skipped, empty group dropped", []flagGroup{{"A", []string{"gone"}}, {"B", []string{"host", "port"}}},
			"B: host port; Other flags: version new-limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlags("x", "x", &bytes.Buffer{})
			fs.String("host", "", "")
			fs.Int("port", 0, "")
			fs.Int("new-limit", 0, "a flag another change adds")
			titles, lists := sortFlags(fs, tc.groups)
			var parts []string
			for i, l := range lists {
				s := titles[i] + ":"
				for _, f := range l {
					s += " " + f.Name
				}
				parts = append(parts, s)
			}
			if got := strings.Join(parts, "; "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEveryCommandsHelp: each command's -h exits 0 with its usage line first, and none lists
// more than fits a few screens (the llama.cpp flags are named, not explained, one per line).
func TestEveryCommandsHelp(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		maxLines int
	}{
		{"serve", []string{"serve", "-h"}, 200},
		{"route", []string{"route", "-h"}, 60},
		{"run", []string{"run", "-h"}, 120},
		{"batched", []string{"batched", "-h"}, 120},
		{"bench", []string{"bench", "-h"}, 120},
		{"bench serve", []string{"bench", "serve", "-h"}, 80},
		{"logits", []string{"logits", "-h"}, 40},
		{"tokenize", []string{"tokenize", "-h"}, 40},
		{"info", []string{"info", "-h"}, 40},
		{"pull", []string{"pull", "-h"}, 40},
		{"list", []string{"list", "-h"}, 40},
		{"rm", []string{"rm", "-h"}, 40},
		{"synth", []string{"synth", "-h"}, 40},
		{"ps", []string{"ps", "-h"}, 40},
		{"stop", []string{"stop", "-h"}, 40},
		{"show", []string{"show", "-h"}, 40},
		{"create", []string{"create", "-h"}, 40},
	}
	usage := regexp.MustCompile(`^Usage: ubatch `)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, help := ubatch(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, help)
			}
			if !usage.MatchString(help) {
				t.Errorf("help does not start with its usage line:\n%s", help)
			}
			if n := strings.Count(help, "\n"); n > tc.maxLines {
				t.Errorf("%d lines of help, more than %d", n, tc.maxLines)
			}
		})
	}
}
