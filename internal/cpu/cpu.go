// Package cpu detects once which instruction sets this machine's CPU has and holds the kernel
// path that the packages with assembly kernels (quant and ops) run: one detection, one
// predicate per instruction set and one selection for both, chosen at start-up (the best path the
// CPU has) and changed only by Select (ubatch's --kernels) or by tests, before any kernel runs.
package cpu

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/cpu"
)

// Path is a set of kernels: the instruction set they are written for. Each kernel belongs to one
// path; a type or operation without a kernel for the selected path runs the kernel of the
// nearest path below it (Lower), down to the pure-Go twins.
type Path uint8

const (
	Go         Path = iota // the pure-Go twins: every architecture
	AVX2                   // amd64: AVX2, FMA, F16C and BMI2 (Haswell, Zen and later)
	AVXVNNI                // amd64: AVX2 plus VEX-encoded VPDPBUSD (AVX-VNNI)
	AVX512VNNI             // amd64: AVX2 plus AVX-512 F, VL and VNNI (EVEX VPDPBUSD)

	// AVXVNNIEvex runs quant's avxvnni panel kernels assembled with EVEX VPDPBUSD, so that tests
	// check that code on AVX-512 VNNI CPUs; it is never chosen, listed or accepted by Select.
	AVXVNNIEvex

	NEON   // arm64: Advanced SIMD, part of every arm64 CPU
	NEONDP // arm64: NEON plus the ARMv8.2 dot-product instructions (SDOT)

	NumPaths // the number of paths, for tables indexed by Path
)

var names = [NumPaths]string{Go: "go", AVX2: "avx2", AVXVNNI: "avxvnni", AVX512VNNI: "avx512vnni",
	AVXVNNIEvex: "avxvnni-evex", NEON: "neon", NEONDP: "neon-dp"}

func (p Path) String() string { return names[p] }

// Lower is the path whose kernels p falls back to where it has none: every amd64 path builds on
// AVX2 (the VNNI paths do not build on each other: an AVX-512 VNNI CPU may lack AVX-VNNI), SDOT
// on NEON, and those on the Go twins.
func (p Path) Lower() Path {
	switch p {
	case AVXVNNI, AVX512VNNI, AVXVNNIEvex:
		return AVX2
	case NEONDP:
		return NEON
	}
	return Go
}

// Nearest is the path whose kernel runs where p is selected: p or the nearest path below it
// (Lower) for which has reports a kernel, else Go (the twin). quant's type table and ops' kernel
// table resolve their kernels with it, once, so that a call only indexes by Selected.
func (p Path) Nearest(has func(Path) bool) Path {
	for p != Go && !has(p) {
		p = p.Lower()
	}
	return p
}

// Resolve is Nearest for every path, for a kernel that the paths in have have: at[p] is the path
// whose kernel runs where p is selected (Go: the twin). Kernels outside a table of their own
// resolve once with it and index the result by Selected.
func Resolve(have ...Path) (at [NumPaths]Path) {
	for p := range NumPaths {
		at[p] = p.Nearest(func(q Path) bool { return slices.Contains(have, q) })
	}
	return at
}

// The instruction sets of this CPU (false off their architecture). HasAVX2 is the one predicate
// of every amd64 kernel: AVX2, FMA, F16C and BMI2.
var (
	HasAVX2       = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C && cpu.X86.HasBMI2
	HasAVXVNNI    = HasAVX2 && cpu.X86.HasAVXVNNI
	HasAVX512VNNI = HasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
	// HasAVX512BW: the byte and word instructions on 512-bit registers, which the AVX-512 VNNI
	// Q4_K kernel on zmm needs (every AVX-512 VNNI CPU sold has them; the predicate is kept apart).
	HasAVX512BW = HasAVX512VNNI && cpu.X86.HasAVX512BW
	HasNEON     = runtime.GOARCH == "arm64"
	HasDotProd  = HasNEON && cpu.ARM64.HasASIMDDP
)

// paths lists the paths this CPU runs, best first; "go" only where there is no assembly.
// x/sys/cpu reports AVX-512 only where the OS saves its state.
var paths = func() []Path {
	var ps []Path
	for _, c := range []struct {
		p   Path
		has bool
	}{{AVX512VNNI, HasAVX512VNNI}, {AVXVNNI, HasAVXVNNI}, {AVX2, HasAVX2}, {NEONDP, HasDotProd}, {NEON, HasNEON}} {
		if c.has {
			ps = append(ps, c.p)
		}
	}
	if len(ps) == 0 {
		ps = []Path{Go}
	}
	return ps
}()

// selected is the path the kernels run; see Selected.
var selected = paths[0]

// Selected is the kernel path in use. Kernels read it (or what their package derived from it
// when it was set) at each call: one load, as the flags it replaces were.
func Selected() Path { return selected }

// Paths lists the paths this CPU runs, best first. "go" is listed only where there is no
// assembly, though Select always accepts it.
func Paths() []Path { return append([]Path(nil), paths...) }

// Has reports whether this CPU runs path p (the Go twins always; AVXVNNIEvex where AVX-512 VNNI
// is).
func Has(p Path) bool {
	switch p {
	case Go:
		return true
	case AVXVNNIEvex:
		return HasAVX512VNNI
	}
	for _, q := range paths {
		if q == p {
			return true
		}
	}
	return false
}

// Select makes the path named name the one in use: "auto" for the best this CPU has, "go" for
// the pure-Go twins, or one of Paths. It is not synchronized with running kernels: call it at
// start-up, before any kernel runs (then reload anything that looked kernels up).
func Select(name string) error {
	if name == "auto" {
		selected = paths[0]
		return nil
	}
	for p := range NumPaths {
		if names[p] == name && p != AVXVNNIEvex && Has(p) {
			selected = p
			return nil
		}
	}
	var list []string
	for _, p := range paths {
		list = append(list, p.String())
	}
	return fmt.Errorf("kernel path %q is not available on this CPU; choose auto, go or one of %s", name, strings.Join(list, ", "))
}

// Use makes p the path in use and returns the previous one, for tests that force each path the
// CPU has in turn (AVXVNNIEvex included). The caller checks Has(p).
func Use(p Path) (previous Path) {
	previous, selected = selected, p
	return previous
}
