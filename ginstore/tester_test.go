package ginstore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gin-contrib/sessions"
	"github.com/gin-contrib/sessions/tester"
	gsessions "github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/ginstore"
)

// testerSuite is gin-contrib's shared store test suite: every exported
// function of github.com/gin-contrib/sessions/tester, by name.
// TestTesterSuiteComplete checks that none is missing.
var testerSuite = map[string]func(*testing.T){
	"GetSet":    func(t *testing.T) { tester.GetSet(t, newTesterStore) },
	"DeleteKey": func(t *testing.T) { tester.DeleteKey(t, newTesterStore) },
	"Flashes":   func(t *testing.T) { tester.Flashes(t, newTesterStore) },
	"Clear":     func(t *testing.T) { tester.Clear(t, newTesterStore) },
	"Options":   func(t *testing.T) { tester.Options(t, newTesterStore) },
	"Many":      func(t *testing.T) { tester.Many(t, newTesterStore) },
}

// TestTester runs gin-contrib's store test suite against a mongostore
// store, each function on a collection of its own.
func TestTester(t *testing.T) {
	names := make([]string, 0, len(testerSuite))
	for name := range testerSuite {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, testerSuite[name])
	}
}

// newTesterStore is the tester's store factory: the adapter on a fresh
// mongostore store, made strict.
func newTesterStore(t *testing.T) sessions.Store {
	return strictStore{Store: ginstore.New(newMongoStore(t, mongostore.Config{})), t: t}
}

// strictStore fails the test when loading a session fails. Get is the only
// store method gin-contrib/sessions calls (sessions save through their
// mongostore store), and it only logs Get's errors, so without this a
// broken cookie or a database error could go unnoticed by the suite.
type strictStore struct {
	*ginstore.Store
	t *testing.T
}

func (s strictStore) Get(r *http.Request, name string) (*gsessions.Session, error) {
	session, err := s.Store.Get(r, name)
	if err != nil {
		s.t.Errorf("Get(%q): %v", name, err)
	}
	return session, err
}

// TestTesterSuiteComplete checks that testerSuite runs every exported
// function of the tester package of the gin-contrib/sessions version in
// go.mod, so that an upgrade that adds one does not go unnoticed.
func TestTesterSuiteComplete(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to find the tester package's source")
	}
	out, err := exec.Command(goCmd, "list", "-f", "{{.Dir}}", "github.com/gin-contrib/sessions/tester").Output()
	if err != nil {
		t.Fatalf("go list the tester package: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var exported []string
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.IsExported() {
				exported = append(exported, fn.Name.Name)
			}
		}
	}
	if len(exported) == 0 {
		t.Fatalf("found no exported functions in %s", dir)
	}
	slices.Sort(exported)
	t.Logf("tester exports %s", strings.Join(exported, ", "))
	for _, name := range exported {
		if _, ok := testerSuite[name]; !ok {
			t.Errorf("tester.%s is not in testerSuite", name)
		}
	}
	for name := range testerSuite {
		if !slices.Contains(exported, name) {
			t.Errorf("testerSuite runs %s, which tester no longer exports", name)
		}
	}
}
