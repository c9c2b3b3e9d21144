// Command attngen writes the attention kernels of package ops, one assembly file each:
//
//	go run ./internal/attngen [-dir DIR]   (from ops/; go generate ./ops runs it)
//
// attn_amd64.s and attn_q8_amd64.s: the AVX2/FMA/F16C kernels over F16 and Q8_0 rows (f16.go,
// q8.go); attn_tile_amd64.s: the AVX-512 tiled attention (tile.go). TestAttnAsmGenerated runs it into a temporary
// directory and checks that the committed files are its output.
//
// The kernels are unrolled over register tiles, one block of code per tile shape, which is why
// they are generated rather than written out by hand.
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

var b bytes.Buffer

// emit writes one instruction, its operands aligned.
func emit(format string, args ...any) {
	op, operands, _ := strings.Cut(fmt.Sprintf(format, args...), " ")
	if operands = strings.TrimSpace(operands); operands == "" {
		fmt.Fprintf(&b, "\t%s\n", op)
		return
	}
	fmt.Fprintf(&b, "\t%-12s %s\n", op, operands)
}

func label(name string) { fmt.Fprintf(&b, "\n%s:\n", name) }

func comment(format string, args ...any) { fmt.Fprintf(&b, "\t// "+format+"\n", args...) }

// files are the generated files and their writers.
var files = []struct {
	name  string
	write func()
}{
	{"attn_amd64.s", f16},
	{"attn_q8_amd64.s", q8},
	{"attn_tile_amd64.s", tile},
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
