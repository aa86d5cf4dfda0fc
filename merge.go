package mongostore

import (
	"context"
	"fmt"
	"reflect"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// When two requests of one session save concurrently, the later one finds
// the document changed since it loaded it. It then applies its own changes
// over the other's, key by key, and saves again: keys only the other
// request changed keep its values; a key both changed gets the later
// save's. A list ([]any, as gorilla's flashes are) merges item by item,
// items matched by their encoding: the items this request added are
// appended, the ones it removed (read flashes) are removed, so no flash is
// lost or delivered twice. A merge never crosses owners.

// maxSaveAttempts bounds the writes of one save that meets concurrent
// saves; after that it fails with ErrConflict. Each conflict means another
// save succeeded, so this many requests of one session can overlap.
const maxSaveAttempts = 32

// merge makes the session's values this request's changes (mine, worked
// out once) applied over those of theirs, the document another save wrote,
// and the data to write, and makes theirs the version sv builds on. Unless
// this request changed the session's options, the MaxAge of theirs
// applies. If another request regenerated the session, or tied it to
// another owner than the session as loaded, the session is gone for this
// request; if this request changed the owner, its values replace theirs
// whole.
func (s *Store) merge(ctx context.Context, sv *saving, theirs bson.Raw, mine **changes) error {
	od, _, values, err := s.open(theirs)
	if err != nil {
		return err
	}
	if od.sid != sv.st.sid {
		return fmt.Errorf("%w: another request regenerated the session", ErrSessionGone)
	}
	if owner, _ := ownerOf(values); owner != sv.st.owner {
		return fmt.Errorf("%w: another request tied the session to another owner", ErrSessionGone)
	}
	if owner, _ := ownerOf(sv.session.Values); owner == sv.st.owner {
		if *mine == nil {
			c, err := s.diff(ctx, s.baseValues(sv.st), sv.session.Values)
			if err != nil {
				return err
			}
			*mine = &c
		}
		if err := s.apply(ctx, *mine, values); err != nil {
			return err
		}
		sv.session.Values = values
	}
	if !sv.ownOptions {
		sv.session.Options.MaxAge = od.maxAge
	}
	sv.st.createdAt = od.createdAt
	sv.st.version = od.version()
	sv.data, err = s.encode(sv.session.Values)
	return err
}

// baseValues returns the values as st says they were loaded, or nil if it
// no longer holds them.
func (s *Store) baseValues(st sessionState) map[any]any {
	if st.encoded == nil {
		return nil
	}
	values, err := s.cfg.Codec.Decode(st.encoded)
	if err != nil {
		return nil
	}
	return values
}

// changes are what one request did to a session's values since it loaded
// them.
type changes struct {
	set     map[any]any // keys added or changed, with their values
	deleted []any       // keys removed
	lists   map[any]listChange
}

// listChange is what one request did to a list value: items by encoding.
type listChange struct {
	added   []any
	removed map[string]int // how many of each were removed
}

// diff returns the changes that turned base into cur. A nil base (unknown)
// makes every key of cur a change, and no key a deletion.
func (s *Store) diff(ctx context.Context, base, cur map[any]any) (changes, error) {
	c := changes{set: map[any]any{}, lists: map[any]listChange{}}
	for k, v := range cur {
		old, had := base[k]
		if had && reflect.DeepEqual(old, v) {
			continue
		}
		newList, isList := v.([]any)
		oldList, wasList := old.([]any)
		if base == nil || !isList || (had && !wasList) {
			c.set[k] = v
			continue
		}
		lc, err := s.listDiff(ctx, oldList, newList)
		if err != nil {
			return c, err
		}
		c.lists[k] = lc
	}
	for k, old := range base {
		if _, ok := cur[k]; ok {
			continue
		}
		if oldList, isList := old.([]any); isList {
			lc, err := s.listDiff(ctx, oldList, nil)
			if err != nil {
				return c, err
			}
			c.lists[k] = lc
			continue
		}
		c.deleted = append(c.deleted, k)
	}
	return c, nil
}

// listDiff returns what turned the list old into cur.
func (s *Store) listDiff(ctx context.Context, old, cur []any) (listChange, error) {
	had, err := s.itemCounts(ctx, old)
	if err != nil {
		return listChange{}, err
	}
	lc := listChange{removed: had}
	for i, item := range cur {
		k, err := s.itemKey(ctx, i, item)
		if err != nil {
			return lc, err
		}
		if had[k] > 0 {
			had[k]--
		} else {
			lc.added = append(lc.added, item)
		}
	}
	return lc, nil // what is left of had was removed
}

// apply applies the changes to values, another request's, in place.
func (s *Store) apply(ctx context.Context, c *changes, values map[any]any) error {
	for k, v := range c.set {
		values[k] = v
	}
	for _, k := range c.deleted {
		delete(values, k)
	}
	for k, lc := range c.lists {
		theirs, _ := values[k].([]any) // a value that is no longer a list is replaced
		removed := make(map[string]int, len(lc.removed))
		for item, n := range lc.removed {
			removed[item] = n
		}
		merged := make([]any, 0, len(theirs)+len(lc.added))
		for i, item := range theirs {
			key, err := s.itemKey(ctx, i, item)
			if err != nil {
				return err
			}
			if removed[key] > 0 {
				removed[key]--
				continue
			}
			merged = append(merged, item)
		}
		if merged = append(merged, lc.added...); len(merged) == 0 {
			delete(values, k)
		} else {
			values[k] = merged
		}
	}
	return nil
}

// itemCounts counts the items of list by encoding.
func (s *Store) itemCounts(ctx context.Context, list []any) (map[string]int, error) {
	counts := make(map[string]int, len(list))
	for i, item := range list {
		k, err := s.itemKey(ctx, i, item)
		if err != nil {
			return nil, err
		}
		counts[k]++
	}
	return counts, nil
}

// itemKey returns the encoding of item, the i-th of its list, by which
// lists are merged; every 1024 items it checks that ctx (Config.Timeout)
// has not run out.
func (s *Store) itemKey(ctx context.Context, i int, item any) (string, error) {
	if i%1024 == 1023 {
		if err := ctx.Err(); err != nil {
			return "", dbError("merge concurrent changes", err)
		}
	}
	b, err := s.cfg.Codec.Encode(map[any]any{"": item})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEncode, err)
	}
	return string(b), nil
}
