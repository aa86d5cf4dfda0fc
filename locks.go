package mongostore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
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

// releaseAfter returns an unlock that releases the lock unlock holds d
// later: a write whose outcome is unknown may still run on the server
// meanwhile, and where its condition and its write are not one step
// (FerretDB v1), it could write over a later save of this process's.
func releaseAfter(unlock func(), d time.Duration) func() {
	return func() { time.AfterFunc(d, unlock) }
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

// lockAll takes the locks of chains, in sorted order (two callers never
// wait on each other), and returns their unlock.
func (l *chainLocks) lockAll(ctx context.Context, chains []string) (func(), error) {
	slices.Sort(chains)
	var unlocks []func()
	unlock := func() {
		for _, u := range unlocks {
			u()
		}
	}
	for _, chain := range slices.Compact(chains) {
		u, err := l.lock(ctx, chain)
		if err != nil {
			unlock()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return unlock, nil
}
