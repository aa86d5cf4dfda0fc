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
// items matched by their encoding (or, where an encoding differs between
// calls, by reflect.DeepEqual): the items this request added are
// appended, the ones it removed (read flashes) are removed, so no flash is
// lost or delivered twice. A merge never crosses owners.

// changes are what one request did to a session's values since it loaded
// them.
type changes struct {
	set     map[any]any // keys added or changed, with their values
	deleted []any       // keys removed
	lists   map[any]listChange
}

// listChange is what one request did to a list value.
type listChange struct {
	added   []any
	removed []keyedItem
}

// keyedItem is an item of a list, with its encoding.
type keyedItem struct {
	key  string
	item any
}

// diff returns the changes that turned base into cur, lists' items told
// apart by codec.
func diff(ctx context.Context, codec Codec, base, cur map[any]any) (changes, error) {
	c := changes{set: map[any]any{}, lists: map[any]listChange{}}
	for k, v := range cur {
		old, had := base[k]
		if had && reflect.DeepEqual(old, v) {
			continue
		}
		newList, isList := v.([]any)
		oldList, wasList := old.([]any)
		if !isList || (had && !wasList) {
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
	had, err := keyed(ctx, codec, old)
	if err != nil {
		return listChange{}, err
	}
	has, err := keyed(ctx, codec, cur)
	if err != nil {
		return listChange{}, err
	}
	removed, added, err := unmatched(ctx, had, has)
	lc := listChange{removed: removed}
	for _, a := range added {
		lc.added = append(lc.added, a.item)
	}
	return lc, err
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
		list, _ := values[k].([]any) // a value that is no longer a list is replaced
		theirs, err := keyed(ctx, codec, list)
		if err != nil {
			return err
		}
		_, kept, err := unmatched(ctx, lc.removed, theirs)
		if err != nil {
			return err
		}
		merged := make([]any, 0, len(kept)+len(lc.added))
		for _, t := range kept {
			merged = append(merged, t.item)
		}
		if merged = append(merged, lc.added...); len(merged) == 0 {
			delete(values, k)
		} else {
			values[k] = merged
		}
	}
	return nil
}

// keyed returns the items of list with their encodings.
func keyed(ctx context.Context, codec Codec, list []any) ([]keyedItem, error) {
	out := make([]keyedItem, len(list))
	for i, item := range list {
		k, err := itemKey(ctx, codec, i, item)
		if err != nil {
			return nil, err
		}
		out[i] = keyedItem{k, item}
	}
	return out, nil
}

// maxDeepPairs bounds the comparisons of unmatched's second pass.
const maxDeepPairs = 1 << 16

// unmatched pairs the items of a with those of b, each at most once, and
// returns those of each left unpaired, in order: first by encoding, then,
// if few are left, by reflect.DeepEqual, as an encoding can differ between
// two calls for one item (gob writes a map in Go's random order).
func unmatched(ctx context.Context, a, b []keyedItem) (aLeft, bLeft []keyedItem, err error) {
	counts := make(map[string]int, len(a))
	for _, x := range a {
		counts[x.key]++
	}
	for _, y := range b {
		if counts[y.key] > 0 {
			counts[y.key]--
		} else {
			bLeft = append(bLeft, y)
		}
	}
	for _, x := range a {
		if counts[x.key] > 0 {
			counts[x.key]--
			aLeft = append(aLeft, x)
		}
	}
	if len(aLeft) == 0 || len(bLeft) == 0 || len(bLeft) > maxDeepPairs/len(aLeft) {
		return aLeft, bLeft, nil
	}
	return pairDeep(ctx, aLeft, bLeft)
}

// pairDeep pairs the items of a with those of b that reflect.DeepEqual
// holds equal, each at most once, and returns those left unpaired; before
// each item of a it checks that ctx (Config.Timeout) has not run out.
func pairDeep(ctx context.Context, a, b []keyedItem) (aLeft, bLeft []keyedItem, err error) {
	paired := make([]bool, len(b))
	for _, x := range a {
		if err := merging(ctx); err != nil {
			return nil, nil, err
		}
		j := -1
		for i, y := range b {
			if !paired[i] && reflect.DeepEqual(x.item, y.item) {
				j = i
				break
			}
		}
		if j < 0 {
			aLeft = append(aLeft, x)
		} else {
			paired[j] = true
		}
	}
	for i, y := range b {
		if !paired[i] {
			bLeft = append(bLeft, y)
		}
	}
	return aLeft, bLeft, nil
}

// itemKey returns the encoding of item, the i-th of its list, by which
// lists are merged; every 1024 items it checks that ctx (Config.Timeout)
// has not run out.
func itemKey(ctx context.Context, codec Codec, i int, item any) (string, error) {
	if i%1024 == 1023 {
		if err := merging(ctx); err != nil {
			return "", err
		}
	}
	b, err := codec.Encode(map[any]any{"": item})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEncode, err)
	}
	return string(b), nil
}

// merging returns an error wrapping ErrDatabase once ctx (Config.Timeout)
// has run out: a merge's bound.
func merging(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return dbError("merge concurrent changes", err)
	}
	return nil
}
