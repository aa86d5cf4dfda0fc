package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bounds on the command's source: lines of its non-test files, and lines
// of a function's body.
const (
	maxLines    = 1530 // 1,560 until the key parsing moved to internal/keyenv, shared with the sample app; 1,550 until end refused an empty -handle (a security review: it ended every session); 1,540 until sessions and end exited 1 when the sample held sessions of keys not given; 1,530 until stats -json named its key counts as a dry run's; 1,520 until a listing at its cap (1,000) said older sessions may exist; 1,500 until sessions and end reported the sessions they could not open (an operator review); 1,490 until check and the keyed commands refused w=0 (an operator review); 1,400 until end -dry-run and the one-line message for an unreachable server (issue 29); 1,425 until the undecodable sessions and -timeout at connect; 1,430 until end -dry-run -handle looked the handle up, and the sample took the oldest live sessions too; 1,475 until a mongodb+srv lookup failure was told from a malformed URI; 1,480 until parseURI left start, which had grown past 40 lines
	maxFuncBody = 50
)

// TestSourceSize checks the command's size: at most maxLines lines of
// non-test Go, and no function with a body over maxFuncBody lines.
func TestSourceSize(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	total := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		total += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if n := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Body.Lbrace).Line - 1; n > maxFuncBody {
					t.Errorf("%s: %s has %d lines, more than %d", name, fd.Name.Name, n, maxFuncBody)
				}
			}
		}
	}
	if total > maxLines {
		t.Errorf("%d lines of non-test Go, more than %d", total, maxLines)
	}
}
