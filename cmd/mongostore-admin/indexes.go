package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The store's document format and indexes, as the README's "Stored
// documents" describes them.
const (
	fieldExpiresAt     = "expiresAt"
	fieldOwner         = "owner"
	expiresAtIndexName = "expiresAt_1"
	ownerIndexName     = "owner_1"
)

// Expiry modes, as the indexes imply them.
const (
	modeTTL  = "TTL"
	modeGC   = "GC"
	modeNone = "none"
)

// index is one index of the collection, as listIndexes gives it.
type index struct {
	Name   string `json:"name"`
	Key    string `json:"key"` // as {field: direction, …}
	TTL    *int64 `json:"expireAfterSeconds,omitempty"`
	Sparse bool   `json:"sparse,omitempty"`
	// plain: exactly what the store creates in GC mode, which it may
	// replace by a TTL index.
	plain bool
	// expiresAt: a single-field index on expiresAt.
	expiresAt bool
	keyFields []string
	ascending bool // a single ascending field
}

// indexReport is what the indexes say about the collection.
type indexReport struct {
	Indexes []index `json:"indexes"`
	// Mode is the expiry mode the indexes imply: TTL (a TTL index on
	// expiresAt), GC (a plain index: a store in GC mode, or a job calling
	// DeleteExpired) or none.
	Mode string `json:"mode"`
	// ExpiresAt is the index on expiresAt the store uses, if any.
	ExpiresAt *index `json:"-"`
	// Problems are differences from what the store expects.
	Problems []string `json:"problems,omitempty"`
	// Notes explain the mode.
	Notes []string `json:"notes,omitempty"`
}

// listIndexes returns the collection's indexes; none if it does not exist.
func listIndexes(ctx context.Context, coll *mongo.Collection) ([]index, error) {
	cur, err := coll.Indexes().List(ctx)
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(26) { // NamespaceNotFound
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	var specs []bson.Raw
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	out := make([]index, 0, len(specs))
	for _, spec := range specs {
		out = append(out, parseIndex(spec))
	}
	return out, nil
}

// parseIndex reads an index specification.
func parseIndex(spec bson.Raw) index {
	var idx index
	idx.Name, _ = spec.Lookup("name").StringValueOK()
	key, _ := spec.Lookup("key").DocumentOK()
	elems, _ := key.Elements()
	var parts []string
	for _, e := range elems {
		idx.keyFields = append(idx.keyFields, e.Key())
		parts = append(parts, e.Key()+": "+keyValue(e.Value()))
	}
	idx.Key = "{" + strings.Join(parts, ", ") + "}"
	if len(elems) == 1 {
		dir, ok := elems[0].Value().AsFloat64OK()
		idx.ascending = ok && dir == 1
	}
	if v, err := spec.LookupErr("expireAfterSeconds"); err == nil {
		if n, ok := v.AsFloat64OK(); ok {
			ttl := int64(n)
			idx.TTL = &ttl
		}
	}
	idx.Sparse, _ = spec.Lookup("sparse").BooleanOK()
	idx.expiresAt = len(idx.keyFields) == 1 && idx.keyFields[0] == fieldExpiresAt
	idx.plain = idx.expiresAt && idx.Name == expiresAtIndexName && idx.ascending && onlyFields(spec, "v", "key", "name", "ns")
	return idx
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

// expiresAtIndex returns the single-field index on expiresAt that the store
// uses, a TTL one with expireAfterSeconds 0 first, or nil.
func expiresAtIndex(indexes []index) *index {
	var found *index
	for i := range indexes {
		idx := &indexes[i]
		if !idx.expiresAt {
			continue
		}
		if found == nil || (idx.TTL != nil && *idx.TTL == 0) {
			found = idx
		}
	}
	return found
}

// analyzeIndexes says which expiry mode indexes imply and how they differ
// from what the store expects, on a server of kind.
func analyzeIndexes(indexes []index, kind string) indexReport {
	r := indexReport{Indexes: indexes, Mode: modeNone}
	exp := expiresAtIndex(indexes)
	r.ExpiresAt = exp
	switch {
	case exp == nil:
		r.Problems = append(r.Problems, "no index on expiresAt: every sweep (DeleteExpired) scans the collection, "+
			"and nothing deletes expired sessions unless a job calls DeleteExpired; NewStore creates "+expiresAtIndexName+
			" unless Config.Expiry is ExpiryNone")
	case exp.TTL != nil && *exp.TTL == 0:
		r.Mode = modeTTL
		r.Notes = append(r.Notes, fmt.Sprintf("%s is a TTL index with expireAfterSeconds 0: the server deletes each session at its expiresAt", exp.Name))
	case exp.TTL != nil:
		r.Mode = modeTTL
		r.Problems = append(r.Problems, fmt.Sprintf("%s is a TTL index with expireAfterSeconds %d, not 0: expired sessions stay %d s longer "+
			"(never served); NewStore in ExpiryAuto or ExpiryTTL changes it with collMod, or fails where the server refuses collMod",
			exp.Name, *exp.TTL, *exp.TTL))
	default:
		r.Mode = modeGC
		r.Notes = append(r.Notes, fmt.Sprintf("%s is a plain index: a store in GC mode (ExpiryGC, or ExpiryAuto where the server "+
			"has no TTL indexes) deletes expired sessions every GCInterval, or a job calls DeleteExpired", exp.Name))
	}
	if exp != nil && exp.Name != expiresAtIndexName {
		r.Notes = append(r.Notes, fmt.Sprintf("the index on expiresAt is called %s, not %s: it is not the store's own, "+
			"so the store never drops or replaces it", exp.Name, expiresAtIndexName))
	}
	if exp != nil && !exp.ascending {
		r.Notes = append(r.Notes, fmt.Sprintf("%s is %s, not {expiresAt: 1} (it serves the store's queries as well)", exp.Name, exp.Key))
	}

	var owner *index
	for i := range indexes {
		if indexes[i].Name == ownerIndexName {
			owner = &indexes[i]
		}
	}
	switch {
	case owner == nil:
		r.Problems = append(r.Problems, "no "+ownerIndexName+" index: listing or ending a user's sessions scans the collection; "+
			"NewStore creates it unless Config.Expiry is ExpiryNone")
	case len(owner.keyFields) != 1 || owner.keyFields[0] != fieldOwner || !owner.ascending:
		r.Problems = append(r.Problems, fmt.Sprintf("%s is %s, not {owner: 1}: the store finds it by name and does not change it; "+
			"drop it and let NewStore create it", ownerIndexName, owner.Key))
	case !owner.Sparse && kind == kindFerretDB1:
		r.Notes = append(r.Notes, ownerIndexName+" is not sparse: FerretDB v1 ignores the option")
	case !owner.Sparse:
		r.Problems = append(r.Problems, ownerIndexName+" is not sparse: it holds an entry for every session, owned or not "+
			"(it works; it costs space)")
	}
	return r
}

// describe says in a few words what idx is.
func (idx index) describe() string {
	s := idx.Key
	if idx.TTL != nil {
		s += fmt.Sprintf(", TTL expireAfterSeconds %d", *idx.TTL)
	}
	if idx.Sparse {
		s += ", sparse"
	}
	return s
}
