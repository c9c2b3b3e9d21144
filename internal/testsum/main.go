// Command testsum runs the tests and says what they skipped. `go run ./internal/testsum ./...`
// runs `go test -json ./...` (any go test flags may come first) and prints what go test prints
// without -v: each failure with its output in full and a line per package; then a summary of how
// many tests ran, passed, failed and skipped, the skips grouped by reason with what makes them
// run (../shared, Chromium, redis-server, ...). Its last line is `N passed, N failed, N skipped`,
// and its exit status is go test's. Without arguments it reads `go test -json` from stdin
// (`go test -json ./... | go run ./internal/testsum`) and exits 1 when anything failed.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main with its streams: with args it runs go test -json args and returns go test's exit
// status, without it reads stdin.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := newSummary(stdout)
	if len(args) == 0 {
		if err := s.read(stdin); err != nil {
			fmt.Fprintf(stderr, "testsum: reading go test -json from stdin: %v\n", err)
			return 1
		}
		s.print(slices.Contains(args, "-short"))
		if s.failed > 0 || len(s.failedPkgs) > 0 {
			return 1
		}
		return 0
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testsum: cannot run go test (is go on PATH?): %v\n", err)
		return 1
	}
	readErr := s.read(out)
	err = cmd.Wait()
	s.print(slices.Contains(args, "-short"))
	if readErr != nil {
		fmt.Fprintf(stderr, "testsum: reading go test's output: %v\n", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "testsum: go test: %v\n", err)
		return 1
	case readErr != nil:
		return 1
	}
	return 0
}

// event is one line of go test -json (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// testKey names one test (subtests included) across packages.
type testKey struct{ pkg, test string }

// summary gathers the counts and skip reasons while it echoes what go test prints without -v.
type summary struct {
	w                       io.Writer
	output                  map[testKey][]string // the output of each test still running
	passed, failed, skipped int
	pkgs                    map[string]bool
	failedPkgs              []string
	failures                []testKey
	skips                   map[string]*skipGroup // by reason title
}

// skipGroup is the tests skipped for one reason.
type skipGroup struct {
	reason reason
	tests  []testKey
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, output: map[testKey][]string{}, pkgs: map[string]bool{}, skips: map[string]*skipGroup{}}
}

// read consumes a go test -json stream; lines that are not JSON are echoed as they are.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20) // a test may log long lines
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.w, "%s\n", line)
			continue
		}
		s.add(e)
	}
	return sc.Err()
}

// add takes one event.
func (s *summary) add(e event) {
	k := testKey{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Action == "build-fail":
		// the package's own "fail" follows and counts it
	case e.Test == "" && e.Action == "output":
		if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "testing: warning: no tests to run") {
			fmt.Fprint(s.w, e.Output) // ok/FAIL lines, a panic or timeout outside any test
		}
	case e.Test == "":
		if e.Package != "" {
			s.pkgs[e.Package] = true
		}
		if e.Action == "fail" {
			s.failedPkgs = append(s.failedPkgs, e.Package)
		}
	case e.Action == "output":
		s.output[k] = append(s.output[k], e.Output)
	case e.Action == "pass":
		s.passed++
		delete(s.output, k)
	case e.Action == "fail":
		s.failed++
		s.failures = append(s.failures, k)
		fmt.Fprint(s.w, strings.Join(s.output[k], ""))
		delete(s.output, k)
	case e.Action == "skip":
		s.skipped++
		r := classify(skipMessage(s.output[k]))
		g := s.skips[r.title]
		if g == nil {
			g = &skipGroup{reason: r}
			s.skips[r.title] = g
		}
		g.tests = append(g.tests, k)
		delete(s.output, k)
	}
}

// skipMessage is the last line a skipped test logged (t.Skip's), without its file:line.
func skipMessage(lines []string) string {
	msg := ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if file, rest, ok := strings.Cut(t, ": "); ok && strings.Contains(file, ".go:") && !strings.Contains(file, " ") {
			t = rest
		}
		msg = t
	}
	return msg
}

// print writes the summary; short says the run had -short.
func (s *summary) print(short bool) {
	w := s.w
	fmt.Fprintf(w, "\n== tests: %d run in %d packages (subtests counted): %d passed, %d failed, %d skipped\n",
		s.passed+s.failed+s.skipped, len(s.pkgs), s.passed, s.failed, s.skipped)
	for _, k := range s.failures {
		fmt.Fprintf(w, "FAIL %s %s\n", k.pkg, k.test)
	}
	for _, p := range s.failedPkgs {
		if !slices.ContainsFunc(s.failures, func(k testKey) bool { return k.pkg == p }) {
			fmt.Fprintf(w, "FAIL %s (the package: a build error, panic or timeout, above)\n", p)
		}
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(w, "skipped, by reason, and what makes them run:\n")
		if short {
			fmt.Fprintf(w, "  (-short was given: the longest tests skip; run without it for them)\n")
		}
		groups := make([]*skipGroup, 0, len(s.skips))
		for _, g := range s.skips {
			groups = append(groups, g)
		}
		slices.SortFunc(groups, func(a, b *skipGroup) int {
			if n := len(b.tests) - len(a.tests); n != 0 {
				return n
			}
			return strings.Compare(a.reason.title, b.reason.title)
		})
		for _, g := range groups {
			fmt.Fprintf(w, "%6d  %s\n", len(g.tests), g.reason.title)
			if g.reason.fix != "" {
				fmt.Fprintf(w, "        to run them: %s\n", g.reason.fix)
			}
			fmt.Fprintf(w, "        e.g. %s\n", examples(g.tests, 3))
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}

// examples names the first n tests, and how many more there are.
func examples(tests []testKey, n int) string {
	var b bytes.Buffer
	for i, k := range tests[:min(n, len(tests))] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", strings.TrimPrefix(k.pkg, "ubatch/"), k.test)
	}
	if len(tests) > n {
		fmt.Fprintf(&b, " and %d more", len(tests)-n)
	}
	return b.String()
}
