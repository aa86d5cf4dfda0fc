package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mongostore/mongostore/internal/loadbench"
	"github.com/mongostore/mongostore/internal/testserver"
)

// The test runs against the server in MONGODB_URI. When it is not set,
// TestMain builds and starts the embedded FerretDB server of the embeddb
// module (../../../embeddb) on a free loopback port.
func TestMain(m *testing.M) {
	if os.Getenv("MONGODB_URI") != "" {
		os.Exit(m.Run())
	}
	uri, stop, err := testserver.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers tests: start embedded server:", err)
		os.Exit(1)
	}
	os.Setenv("MONGODB_URI", uri)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "peers tests: stop embedded server:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// TestRun runs the benchmark briefly with the floor, the store and
// laziness-coders/mongostore: every request of every variant succeeds
// (Run fails otherwise), and both tables have laziness's rows.
func TestRun(t *testing.T) {
	var out, stderr bytes.Buffer
	err := loadbench.Run(context.Background(), []string{"-uri", os.Getenv("MONGODB_URI"), "-db", "mongostore_peers_test",
		"-users", "2", "-rounds", "2", "-round", "150ms", "-warmup", "50ms", "-variants", "floor,store,laziness", "-timeout", "2m"},
		&out, &stderr, laziness())
	t.Log(out.String())
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	for _, row := range []string{"| rw | laziness | ", "| ro | laziness | ", "| rw | store ÷ laziness | ", "| ro | store ÷ laziness | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q", row)
		}
	}
	for _, want := range []string{lazinessModule + " v0.0.14", driverV1Module + " v1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output does not name %q", want)
		}
	}
}
