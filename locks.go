package mongostore

import (
	"context"
	"fmt"
	"sync"
)

// chainLocks lets one transition of a session (a save, a regeneration, an
// ending) run at a time in this process: FerretDB v1's commands, which
// read and then write, are then safe within one process, and on every
// server an ending meets no write of the same process half done. Other
// processes' transitions meet the conditional writes of collection.go.
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
		return nil, fmt.Errorf("%w: wait for a concurrent save: %w", ErrDatabase, ctx.Err())
	}
}
