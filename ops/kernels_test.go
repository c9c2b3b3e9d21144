package ops

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/internal/cpu"
	"ubatch/quant"
)

// kernelCase is one path's expected kernel table: for each op with assembly on that path, the
// path whose kernel runs (every other op runs its Go twin). wantKernels (kernels_<arch>_test.go)
// holds this architecture's cases besides "go".
type kernelCase struct {
	name string
	path cpu.Path
	asm  map[op]cpu.Path
}

// TestKernelTable: on each path, named as --kernels names it, every op resolves to the path
// written out by hand in wantKernels; "go" resolves every op to its twin. Use, not Select, so
// that the paths this CPU lacks are checked too (nothing runs).
func TestKernelTable(t *testing.T) {
	cases := append([]kernelCase{{name: "go", path: cpu.Go}}, wantKernels...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.path.String(); got != tc.name {
				t.Fatalf("path %d is named %q, want %q", tc.path, got, tc.name)
			}
			defer cpu.Use(cpu.Use(tc.path))
			for o := range numOps {
				want, ok := tc.asm[o]
				if !ok {
					want = cpu.Go
				}
				if got := kernelPath(o); got != want {
					t.Errorf("%v: runs the %v kernel, want %v", o, got, want)
				}
				if got := runsAsm(o); got != (want != cpu.Go) {
					t.Errorf("%v: runsAsm %v with kernel path %v", o, got, want)
				}
			}
			wantFast := tc.asm[opTileStep] != cpu.Go && tc.asm[opRowStep] != cpu.Go
			if got := AttnTiledFast(); got != wantFast {
				t.Errorf("AttnTiledFast %v, want %v", got, wantFast)
			}
		})
	}
}

// TestKernelTableNames: every op has a name (the table's error messages use them).
func TestKernelTableNames(t *testing.T) {
	seen := map[string]bool{}
	for o := range numOps {
		if n := o.String(); n == "" || seen[n] {
			t.Errorf("op %d: name %q empty or repeated", o, n)
		} else {
			seen[n] = true
		}
	}
}

// TestKernelsGoRunsTwins: after quant.SetKernelPath("go"), what ubatch --kernels go calls, no
// op runs assembly, and the exported entry points give their Go twins' bits (the assembly's
// summation order differs, so on these lengths the sums' bits would differ too: the subtest
// "auto" checks that where the CPU has assembly).
func TestKernelsGoRunsTwins(t *testing.T) {
	old := quant.KernelPath()
	defer func() {
		if err := quant.SetKernelPath(old); err != nil {
			t.Fatal(err)
		}
	}()
	for _, tc := range []struct {
		name  string
		twins bool
	}{{"go", true}, {"auto", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := quant.SetKernelPath(tc.name); err != nil {
				t.Fatal(err)
			}
			asm := 0
			for o := range numOps {
				if runsAsm(o) {
					asm++
					if tc.twins {
						t.Errorf("%v runs the %v kernel on --kernels go", o, kernelPath(o))
					}
				}
			}
			if !tc.twins && asm == 0 {
				t.Skip("no ops assembly on this CPU: auto is the twins too")
			}
			diff := twinDiffs(t)
			for name, d := range diff {
				if tc.twins && d {
					t.Errorf("%s: bits differ from its Go twin on --kernels go", name)
				}
			}
			if !tc.twins {
				// Sums only: an axpy's elements are one multiply-add each, which the Go compiler
				// fuses on arm64 as the NEON kernels do (the same bits there).
				for _, name := range []struct {
					o    op
					name string
				}{{opDotF32, "DotF32"}, {opSoftmax, "SoftmaxInPlace"}, {opAttnScoresF16, "AttnScoresF16"},
					{opDeltaRule, "DeltaRuleStep"}} {
					if runsAsm(name.o) && !diff[name.name] {
						t.Errorf("%s: same bits as its Go twin: the check could not catch assembly", name.name)
					}
				}
			}
		})
	}
}

// twinDiffs runs exported entry points and their Go twins on the same random inputs and reports,
// by entry point, whether any output bit differs.
func twinDiffs(t *testing.T) map[string]bool {
	t.Helper()
	r := rand.New(rand.NewPCG(34, 6))
	const n = 1003
	x, y, a, b := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	h := make([]uint16, n)
	w := make([]uint64, n)
	for i := range n {
		x[i], y[i] = r.Float32()*2-1, r.Float32()*2-1
		h[i] = quant.F32ToF16(r.Float32()*2 - 1)
		w[i] = r.Uint64()
	}
	d := map[string]bool{}
	bits := func(u, v []float32) bool {
		for i := range u {
			if math.Float32bits(u[i]) != math.Float32bits(v[i]) {
				return true
			}
		}
		return false
	}
	d["DotF32"] = math.Float32bits(DotF32(x, y)) != math.Float32bits(dotF32Go(x, y))
	d["DotF16"] = math.Float32bits(DotF16(x, h)) != math.Float32bits(dotF16Go(x, h))
	copy(a, y)
	copy(b, y)
	AxpyF32(0.37, x, a)
	axpyF32Go(0.37, x, b)
	d["AxpyF32"] = bits(a, b)
	copy(a, y)
	copy(b, y)
	AxpyF16(0.37, h, a)
	axpyF16Go(0.37, h, b)
	d["AxpyF16"] = bits(a, b)
	SwiGLU(a, x, y)
	swigluGo(b, x, y)
	d["SwiGLU"] = bits(a, b)
	copy(a, x)
	copy(b, x)
	SoftmaxInPlace(a)
	softmaxGo(b)
	d["SoftmaxInPlace"] = bits(a, b)
	d["SumWords"] = SumWords(w) != sumWordsGo(w)

	const heads, hd, cells = 4, 64, 13
	q := x[:heads*hd]
	kv := h[:cells*hd]
	idx := make([]int32, cells)
	for i := range idx {
		idx[i] = int32(cells - 1 - i)
	}
	AttnScoresF16(q, heads, hd, kv, idx, hd, 0.125, a[:heads*cells])
	attnScoresF16Go(q, heads, hd, kv, idx, hd, 0.125, b[:heads*cells])
	d["AttnScoresF16"] = bits(a[:heads*cells], b[:heads*cells])
	AttnValuesF16(y[:heads*cells], heads, hd, kv, idx, hd, a[:heads*hd])
	attnValuesF16Go(y[:heads*cells], heads, hd, kv, idx, hd, b[:heads*hd])
	d["AttnValuesF16"] = bits(a[:heads*hd], b[:heads*hd])

	const dk, dv = 32, 16 // the gated delta rule on a state in a and b
	copy(a[:dk*dv], y)
	copy(b[:dk*dv], y)
	o1, o2 := make([]float32, dv), make([]float32, dv)
	DeltaRuleStep(o1, a[:dk*dv], x[:dk], x[dk:2*dk], x[2*dk:2*dk+dv], dk, dv, 0.9, 0.6, 0.17)
	deltaRuleGo(o2, b[:dk*dv], x[:dk], x[dk:2*dk], x[2*dk:2*dk+dv], dk, dv, 0.9, 0.6, 0.17)
	d["DeltaRuleStep"] = bits(o1, o2) || bits(a[:dk*dv], b[:dk*dv])
	return d
}

// onPath maps each of ops to path p.
func onPath(p cpu.Path, ops []op) map[op]cpu.Path {
	m := map[op]cpu.Path{}
	for _, o := range ops {
		m[o] = p
	}
	return m
}

// merge is the union of a and b (b's entries win).
func merge(a, b map[op]cpu.Path) map[op]cpu.Path {
	for o, p := range b {
		a[o] = p
	}
	return a
}

// TestNoScatteredPredicates: in ops' sources (every architecture's), only kernels.go reads the
// selected path and only peak_amd64.go reads the CPU's instruction sets (its loops measure the
// machine, whatever the path), so that no entry point chooses its kernel by a predicate of its
// own beside the table.
func TestNoScatteredPredicates(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{"Selected": "kernels.go", "Has": "peak_amd64.go"}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "cpu" {
				return true
			}
			for prefix, file := range allowed {
				if strings.HasPrefix(sel.Sel.Name, prefix) && name != file {
					t.Errorf("%s: cpu.%s: choose kernels through the table (kernels.go, kernels_<arch>.go)", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
