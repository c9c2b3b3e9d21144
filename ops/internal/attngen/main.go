// Command attngen writes the attention kernels of package ops, one assembly file each, and the
// header of the macros two of them share:
//
//	go run ./internal/attngen [-dir DIR]   (from ops/; go generate ./ops runs it)
//
// attn_amd64.s and attn_q8_amd64.s: the AVX2/FMA/F16C kernels over F16 and Q8_0 rows (f16.go,
// q8.go), with attn_amd64.h; attn_tile_amd64.s: the AVX-512 tiled attention (tile.go);
// attn_row_amd64.s: its row layout for blocks of few rows (row.go, rowload.go).
// TestAttnAsmGenerated runs it into a temporary directory and checks that the committed files are
// its output.
//
// The kernels are unrolled over register tiles, one block of code per tile shape, which is why
// they are generated rather than written out by hand. What the blocks share is written once, as
// an assembler macro (define, chain) that each block invokes with its registers and offsets.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// b is the file being written (or, in capture, a macro's body).
var b = new(bytes.Buffer)

// emit writes one instruction, its operands aligned, or a macro.
func emit(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	op, operands, _ := strings.Cut(line, " ")
	if strings.Contains(op, "(") {
		fmt.Fprintf(b, "\t%s\n", line) // a macro's arguments
		return
	}
	if operands = strings.TrimSpace(operands); operands == "" {
		fmt.Fprintf(b, "\t%s\n", op)
		return
	}
	fmt.Fprintf(b, "\t%-12s %s\n", op, operands)
}

func label(name string) { fmt.Fprintf(b, "\n%s:\n", name) }

func comment(format string, args ...any) { fmt.Fprintf(b, "\t// "+format+"\n", args...) }

// define writes the macro head (a name, with its parameters if any), its body what body emits:
// instructions, labels (which then must be parameters) and macros. A body of one instruction
// stays on the #define line.
func define(doc, head string, body func()) {
	lines := capture(body)
	docComment(doc)
	if len(lines) == 1 && !strings.HasSuffix(lines[0], ":") {
		fmt.Fprintf(b, "#define %s %s\n", head, strings.TrimSpace(lines[0]))
		return
	}
	fmt.Fprintf(b, "#define %s \\\n", head)
	for i, l := range lines {
		switch {
		case i == len(lines)-1:
			fmt.Fprintf(b, "%s\n", l)
		case strings.HasSuffix(l, ":"):
			fmt.Fprintf(b, "%s \\\n", l)
		default:
			fmt.Fprintf(b, "%s; \\\n", l)
		}
	}
}

// chain writes the macros name1 .. name<n>, one a line: each the one before (if any), then what
// step(i) emits for i = 0 .. n-1, so name<k> is the first k steps of an unrolled loop.
func chain(doc, name string, n int, step func(i int)) {
	docComment(doc)
	for i := 0; i < n; i++ {
		var parts []string
		if i > 0 {
			parts = append(parts, fmt.Sprintf("%s%d", name, i))
		}
		for _, l := range capture(func() { step(i) }) {
			parts = append(parts, strings.Join(strings.Fields(l), " "))
		}
		fmt.Fprintf(b, "#define %s%d %s\n", name, i+1, strings.Join(parts, "; "))
	}
}

// fmaMacros defines name1 .. name<n>(off, w0.., a0..): load(off) leaves a chunk of 8 floats in
// Y15, then a<h> += it · w<h> for h < n.
func fmaMacros(name string, n int, load func()) {
	for k := 1; k <= n; k++ {
		define("", fmt.Sprintf("%s%d(off, %s, %s)", name, k, params("w", k), params("a", k)), func() {
			load()
			for h := 0; h < k; h++ {
				emit("VFMADD231PS  Y15, w%d, a%d", h, h)
			}
		})
	}
}

// loads writes a MOVQ for each of moves ("arg+off(FP), reg"): a kernel loading its arguments.
func loads(moves ...string) {
	for _, m := range moves {
		emit("MOVQ %s", m)
	}
}

// params is "p0, p1, .., p<n-1>": a macro's parameters, or the arguments that name them.
func params(p string, n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%s%d", p, i)
	}
	return strings.Join(s, ", ")
}

// docComment writes doc, if any, as a comment of lines up to 100 columns after a blank line.
func docComment(doc string) {
	if doc == "" {
		return
	}
	b.WriteString("\n//")
	n := 2
	for _, w := range strings.Fields(doc) {
		if n+1+len(w) > 100 {
			b.WriteString("\n//")
			n = 2
		}
		fmt.Fprintf(b, " %s", w)
		n += 1 + len(w)
	}
	b.WriteString("\n")
}

// capture returns the lines that f emits, without blank ones.
func capture(f func()) []string {
	saved := b
	b = new(bytes.Buffer)
	f()
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	b = saved
	return lines
}

// files are the generated files and their writers.
var files = []struct {
	name  string
	write func()
}{
	{"attn_amd64.h", shared},
	{"attn_amd64.s", f16},
	{"attn_q8_amd64.s", q8},
	{"attn_tile_amd64.s", tile},
	{"attn_row_amd64.s", row},
}

func main() {
	dir := flag.String("dir", ".", "directory to write the files into")
	flag.Parse()
	for _, f := range files {
		b.Reset()
		f.write()
		if err := os.WriteFile(filepath.Join(*dir, f.name), b.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
