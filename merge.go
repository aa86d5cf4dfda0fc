package mongostore

import (
	"context"
	"fmt"
	"reflect"
)

// When two requests of one session save concurrently, the later one finds
// the document changed since it loaded it. It then applies its own changes
// over the other's, key by key, and saves again: keys only the other
// request changed keep its values; a key both changed gets the later
// save's. A list ([]any, as gorilla's flashes are) merges item by item,
// items matched by their encoding: the items this request added are
// appended, the ones it removed (read flashes) are removed, so no flash is
// lost or delivered twice. A merge never crosses owners.

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

// diff returns the changes that turned base into cur, lists' items told
// apart by codec. A nil base (unknown) makes every key of cur a change,
// and no key a deletion.
func diff(ctx context.Context, codec Codec, base, cur map[any]any) (changes, error) {
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
		lc, err := listDiff(ctx, codec, oldList, newList)
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
			lc, err := listDiff(ctx, codec, oldList, nil)
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
func listDiff(ctx context.Context, codec Codec, old, cur []any) (listChange, error) {
	had, err := itemCounts(ctx, codec, old)
	if err != nil {
		return listChange{}, err
	}
	lc := listChange{removed: had}
	for i, item := range cur {
		k, err := itemKey(ctx, codec, i, item)
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
func apply(ctx context.Context, codec Codec, c *changes, values map[any]any) error {
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
			key, err := itemKey(ctx, codec, i, item)
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
func itemCounts(ctx context.Context, codec Codec, list []any) (map[string]int, error) {
	counts := make(map[string]int, len(list))
	for i, item := range list {
		k, err := itemKey(ctx, codec, i, item)
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
func itemKey(ctx context.Context, codec Codec, i int, item any) (string, error) {
	if i%1024 == 1023 {
		if err := ctx.Err(); err != nil {
			return "", dbError("merge concurrent changes", err)
		}
	}
	b, err := codec.Encode(map[any]any{"": item})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEncode, err)
	}
	return string(b), nil
}
