package setup

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Index is an index specification, as listIndexes gives it.
type Index struct {
	Name   string `json:"name"`
	Key    string `json:"key"` // as {field: direction, …}
	TTL    *int64 `json:"expireAfterSeconds,omitempty"`
	Sparse bool   `json:"sparse,omitempty"`
	// Partial: it has a partialFilterExpression.
	Partial bool `json:"partial,omitempty"`
	// Fields are the key's fields, in order.
	Fields []string `json:"-"`
	// Ascending: a single ascending field; Ordered: a single field,
	// ascending or descending (not hashed, text or geo).
	Ascending, Ordered bool `json:"-"`
	// Plain: exactly what the store creates in GC mode, {expiresAt: 1}
	// named expiresAt_1 without options, which it may replace by a TTL
	// index. The store never drops another index.
	Plain bool `json:"-"`
	// Format1Owner: the shape of a format 1 owner index (see
	// IsFormat1Owner): {owner: 1} named owner_1 with no option but sparse,
	// or, from format 1's first commits (e3496e5 to ed25c46),
	// {owner: 1, expiresAt: 1} named owner_1_expiresAt_1, partial on
	// {owner: {$exists: true}} or sparse.
	Format1Owner bool `json:"-"`
}

// On reports whether the index is a single-field one on field.
func (idx Index) On(field string) bool { return len(idx.Fields) == 1 && idx.Fields[0] == field }

// ParseIndexes reads index specifications.
func ParseIndexes(specs []bson.Raw) []Index {
	out := make([]Index, 0, len(specs))
	for _, spec := range specs {
		out = append(out, ParseIndex(spec))
	}
	return out
}

// ParseIndex reads an index specification, whatever its bytes.
func ParseIndex(spec bson.Raw) Index {
	var idx Index
	idx.Name, _ = spec.Lookup("name").StringValueOK()
	key, _ := spec.Lookup("key").DocumentOK()
	elems, _ := key.Elements()
	parts := make([]string, 0, len(elems))
	for _, e := range elems {
		idx.Fields = append(idx.Fields, e.Key())
		parts = append(parts, e.Key()+": "+keyValue(e.Value()))
	}
	idx.Key = "{" + strings.Join(parts, ", ") + "}"
	if len(elems) == 1 {
		dir, ok := elems[0].Value().AsFloat64OK()
		idx.Ascending, idx.Ordered = ok && dir == 1, ok && (dir == 1 || dir == -1)
	}
	if n, ok := spec.Lookup("expireAfterSeconds").AsFloat64OK(); ok {
		ttl := int64(n)
		idx.TTL = &ttl
	}
	idx.Sparse, _ = spec.Lookup("sparse").BooleanOK()
	_, idx.Partial = spec.Lookup("partialFilterExpression").DocumentOK()
	idx.Plain = idx.On(FieldExpiresAt) && idx.Name == ExpiresAtIndexName && idx.Ascending &&
		onlyFields(spec, "v", "key", "name", "ns")
	idx.Format1Owner = isFormat1Owner(spec, idx)
	return idx
}

// isFormat1Owner reports whether spec, read as idx, has the shape of a
// format 1 owner index (Index.Format1Owner).
func isFormat1Owner(spec bson.Raw, idx Index) bool {
	switch idx.Name {
	case SparseOwnerIndexName:
		return idx.On(FieldOwner) && idx.Ascending && onlyFields(spec, "v", "key", "name", "ns", "sparse")
	case EarlyOwnerIndexName:
		want, _ := bson.Marshal(bson.D{{Key: FieldOwner, Value: bson.D{{Key: "$exists", Value: true}}}}) // as they created it
		filter, partial := spec.Lookup("partialFilterExpression").DocumentOK()
		return idx.Key == "{owner: 1, expiresAt: 1}" && onlyFields(spec, "v", "key", "name", "ns", "sparse", "partialFilterExpression") &&
			(!partial || bytes.Equal(filter, want))
	}
	return false
}

// keyValue shows the value of an index key's field: 1, -1, "hashed".
func keyValue(v bson.RawValue) string {
	if n, ok := v.AsFloat64OK(); ok {
		return strconv.FormatFloat(n, 'g', -1, 64)
	}
	if s, ok := v.StringValueOK(); ok {
		return strconv.Quote(s)
	}
	return v.String()
}

// onlyFields reports whether doc has no fields but the allowed ones.
func onlyFields(doc bson.Raw, allowed ...string) bool {
	elems, err := doc.Elements()
	if err != nil {
		return false
	}
	for _, e := range elems {
		if !slices.Contains(allowed, e.Key()) {
			return false
		}
	}
	return true
}

// IsTTL reports whether idx is the TTL index the store wants: it deletes
// each document at its expiresAt.
func (idx *Index) IsTTL() bool { return idx.TTL != nil && *idx.TTL == TTLExpireAfterSeconds }

// FindExpiresAt returns the single-field ordered index on expiresAt among
// indexes that the store uses, a TTL one with expireAfterSeconds 0 first
// and a partial one last, or nil. A hashed one is another's: neither a TTL
// index nor one a sweep's range can use.
func FindExpiresAt(indexes []Index) *Index {
	rank := func(idx *Index) int {
		switch {
		case idx.Partial:
			return 0
		case idx.IsTTL():
			return 2
		}
		return 1
	}
	var found *Index
	for i := range indexes {
		idx := &indexes[i]
		if idx.On(FieldExpiresAt) && idx.Ordered && (found == nil || rank(idx) > rank(found)) {
			found = idx
		}
	}
	return found
}

// IsFormat1Owner reports whether idx is a format 1 owner index, which
// NewStore drops: of its shape and sparse (or partial), or of its shape on
// FerretDB v1 (v1), which does not report sparse. An application's
// {owner: 1} of that name, without sparse, is not the store's.
func (idx Index) IsFormat1Owner(v1 bool) bool {
	return idx.Format1Owner && (idx.Sparse || idx.Partial || v1)
}

// ServesOwners reports whether indexes, on FerretDB v1 if v1, hold one that
// serves the listing of an owner's sessions, so that NewStore creates no
// owner index: the store's own (OwnerIndexName), or the application's
// ordered index on owner that is not partial and not format 1's (which
// NewStore drops).
func ServesOwners(indexes []Index, v1 bool) bool {
	return slices.ContainsFunc(indexes, func(i Index) bool {
		return i.Name == OwnerIndexName || i.On(FieldOwner) && i.Ordered && !i.Partial && !i.IsFormat1Owner(v1)
	})
}
