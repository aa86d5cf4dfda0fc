package mongostore

import (
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/sessions"
)

func TestStateIsReleasedWithSessions(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	for range 200 {
		if s, err := load(t, f, b); err != nil || s.IsNew {
			t.Fatal("not loaded")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.store.states.len() > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d session states still held after GC: the table leaks", f.store.states.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionTableStaysBounded checks that entries of reclaimed sessions do
// not pile up in a busy table: set sweeps them out as the table grows.
func TestSessionTableStaysBounded(t *testing.T) {
	table := newSessionTable[int]()
	for i := range 20 * minSweep {
		table.set(&sessions.Session{ID: "x"}, i)
		if i%minSweep == 0 {
			runtime.GC()
		}
	}
	table.mu.Lock()
	n := len(table.m)
	table.mu.Unlock()
	if n > 4*minSweep {
		t.Fatalf("%d entries held for sessions that are all unreachable, want at most %d", n, 4*minSweep)
	}
}
