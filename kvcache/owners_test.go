package kvcache

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestStateHasOneWriter: the Manager's per-block state and free list are written only in
// blocks.go, its per-cell state only in cells.go and its pending store operations only in
// ops.go (assignments, ++/--, copy and clear into them), so that each type keeps its
// invariants. A write elsewhere is reported with its place.
func TestStateHasOneWriter(t *testing.T) {
	owner := map[string]string{"cells.ps": "cells.go", "cells.ts": "cells.go", "ops.ops": "ops.go", "ops.nImg": "ops.go"}
	for _, f := range []string{"ref", "hash", "parent", "hashed", "stale", "part", "depth", "hits", "free"} {
		owner[f] = "blocks.go"
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, ent := range entries {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		check := func(e ast.Expr) {
			field := managerField(e)
			if want, ok := owner[field]; ok && want != name {
				t.Errorf("%s: writes the Manager's %s, which only %s may write: add a method there", fset.Position(e.Pos()), field, want)
			}
			checked++
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, e := range n.Lhs {
					check(e)
				}
			case *ast.IncDecStmt:
				check(n.X)
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "copy" || id.Name == "clear") && len(n.Args) > 0 {
					check(n.Args[0])
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no writes found: the test read no code")
	}
}

// managerField names the Manager field e writes through the receiver c ("ref" for c.ref[b],
// "cells.ps" for c.cells.ps[i:j], "ref" for c.blockState.ref), or "" for anything else.
func managerField(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.IndexExpr:
			e = x.X
			continue
		case *ast.SliceExpr:
			e = x.X
			continue
		}
		break
	}
	var path []string
	for {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			break
		}
		path = append([]string{sel.Sel.Name}, path...)
		e = sel.X
	}
	if id, ok := e.(*ast.Ident); !ok || id.Name != "c" || len(path) == 0 {
		return ""
	}
	if path[0] == "blockState" {
		path = path[1:]
	}
	return strings.Join(path, ".")
}
