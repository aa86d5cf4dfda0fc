package mongostore

import (
	"context"
	"reflect"
	"sync"
)

// When two requests of one session save concurrently, the later one finds
// the document changed since it loaded it. It then applies its own changes
// over the other's, key by key, and saves again: keys only the other
// request changed keep its values; a key both changed gets the later
// save's. A list ([]any, as gorilla's flashes are) merges item by item: the
// items this request added are appended, the ones it removed (read
// flashes) are removed, so no flash is lost or delivered twice.

// maxSaveAttempts bounds the writes of one save that meets concurrent
// saves; after that it fails with ErrConflict. Each conflict means another
// save succeeded, so this many requests of one session can overlap.
const maxSaveAttempts = 32

// maxMergedList bounds the lists merged item by item (quadratic); a longer
// one is replaced whole.
const maxMergedList = 256

// changes are what one request did to a session's values since it loaded
// them.
type changes struct {
	set     map[any]any // keys added or changed, with their values
	deleted []any       // keys removed
	lists   map[any]listChange
}

// listChange is what one request did to a list value.
type listChange struct{ added, removed []any }

// diff returns the changes that turned base into cur. A nil base (unknown)
// makes every key of cur a change, and no key a deletion.
func diff(base, cur map[any]any) changes {
	c := changes{set: map[any]any{}, lists: map[any]listChange{}}
	for k, v := range cur {
		old, had := base[k]
		if had && reflect.DeepEqual(old, v) {
			continue
		}
		newList, isList := v.([]any)
		oldList, wasList := old.([]any)
		if base != nil && isList && (wasList || !had) && len(oldList)+len(newList) <= maxMergedList {
			c.lists[k] = listChange{added: without(newList, oldList), removed: without(oldList, newList)}
			continue
		}
		c.set[k] = v
	}
	for k, old := range base {
		if _, ok := cur[k]; ok {
			continue
		}
		if oldList, isList := old.([]any); isList && len(oldList) <= maxMergedList {
			c.lists[k] = listChange{removed: oldList}
			continue
		}
		c.deleted = append(c.deleted, k)
	}
	return c
}

// empty reports whether there are no changes.
func (c changes) empty() bool { return len(c.set) == 0 && len(c.deleted) == 0 && len(c.lists) == 0 }

// apply applies the changes to values, another request's, in place.
func (c changes) apply(values map[any]any) {
	for k, v := range c.set {
		values[k] = v
	}
	for _, k := range c.deleted {
		delete(values, k)
	}
	for k, lc := range c.lists {
		theirs, _ := values[k].([]any) // a value that is no longer a list is replaced
		merged := append(without(theirs, lc.removed), lc.added...)
		if len(merged) == 0 {
			delete(values, k)
		} else {
			values[k] = merged
		}
	}
}

// without returns the items of list but those in remove, one removed per
// occurrence in remove, in order.
func without(list, remove []any) []any {
	out := make([]any, 0, len(list))
	used := make([]bool, len(remove))
next:
	for _, item := range list {
		for j, r := range remove {
			if !used[j] && reflect.DeepEqual(item, r) {
				used[j] = true
				continue next
			}
		}
		out = append(out, item)
	}
	return out
}

// idLocks serializes the saves of one session within this process, for a
// server without an atomic conditional update (FerretDB v1).
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	ch   chan struct{}
	refs int
}

// lock waits for the lock of id, or for ctx to end, and returns its unlock.
func (l *idLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*idLock)
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{ch: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
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
