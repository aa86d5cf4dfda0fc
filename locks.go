package mongostore

import (
	"context"
	"sync"
)

// chainLocks lets one transition of a session (a save, a regeneration, an
// ending) run at a time in this process. Another process's meet the
// conditional writes of collection.go; this spares a process's own
// requests that round trip, and makes FerretDB v1's non-atomic commands
// safe within one process.
type chainLocks struct {
	mu sync.Mutex
	m  map[string]*chainLock
}

type chainLock struct {
	ch   chan struct{}
	refs int
}

// lock waits for the lock of chain, or for ctx to end, and returns its
// unlock.
func (l *chainLocks) lock(ctx context.Context, chain string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*chainLock)
	}
	e := l.m[chain]
	if e == nil {
		e = &chainLock{ch: make(chan struct{}, 1)}
		l.m[chain] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, chain)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, dbError("wait for a concurrent save", ctx.Err())
	}
}
