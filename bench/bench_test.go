package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// runOK runs bench with args and checks that it succeeds and prints want.
func runOK(t *testing.T, args []string, want ...string) {
	var out bytes.Buffer
	err := run(context.Background(), args, &out, io.Discard)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// TestScale runs bench scale at a small size: nothing is lost.
func TestScale(t *testing.T) {
	runOK(t, []string{"scale", "-db", "mongostore_scale_test", "-n", "2000", "-sessions", "50", "-loads", "100",
		"-workers", "2", "-rounds", "2", "-phase-timeout", "90s", "-timeout", "4m"},
		"lost: 0; the 50 real sessions reloaded", "0 of 1750 live filler documents missing", "| 2000 |", "owners: 10 of 5 sessions each")
}

// TestHTTP runs bench http briefly: every request of every variant succeeds
// (run fails otherwise) and both tables have their rows.
func TestHTTP(t *testing.T) {
	runOK(t, []string{"http", "-db", "mongostore_loadbench_test", "-users", "2", "-rounds", "2", "-round", "150ms",
		"-warmup", "50ms", "-timeout", "2m"},
		"| rw | floor | ", "| ro | middleware | ", "| rw | laziness | ", "| ro | store ÷ laziness | ", "mongo-driver v1.")
}
