package mongostore

import (
	"runtime"
	"testing"
	"time"
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
