// Package review says what a sessions collection's indexes and documents
// are, next to what the store expects of them, for mongostore-admin.
package review

import (
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongostore/mongostore/internal/setup"
)

// Expiry modes, as the indexes imply them.
const (
	ModeTTL  = "TTL"
	ModeGC   = "GC"
	ModeNone = "none"
)

// Review is what indexes say about a sessions collection, next to what
// the store expects of them: the expiry mode they imply (TTL: a TTL index
// on expiresAt; GC: a plain one, for a store in GC mode or a job calling
// DeleteExpired; none), the index on expiresAt the store uses, how they
// differ from what it expects (Problems), and notes on the mode.
type Review struct {
	Indexes   []setup.Index `json:"indexes"`
	Mode      string        `json:"mode"`
	ExpiresAt *setup.Index  `json:"-"`
	Problems  []string      `json:"problems,omitempty"`
	Notes     []string      `json:"notes,omitempty"`
}

// ReviewIndexes reviews indexes, on a server of kind. What NewStore would
// do about them depends on the server's answers too: Decide says.
func ReviewIndexes(indexes []setup.Index, kind string) Review {
	r := Review{Indexes: indexes, Mode: ModeNone, ExpiresAt: setup.FindExpiresAt(indexes)}
	switch exp := r.ExpiresAt; {
	case exp == nil:
		r.Problems = append(r.Problems, "no index on expiresAt: every sweep (DeleteExpired) scans the collection, "+
			"and nothing deletes expired sessions unless a job calls DeleteExpired")
	case exp.IsTTL():
		r.Mode = ModeTTL
		r.Notes = append(r.Notes, exp.Name+" is a TTL index with expireAfterSeconds 0: the server deletes each session at its expiresAt")
	case exp.TTL != nil:
		r.Mode = ModeTTL
		r.Problems = append(r.Problems, fmt.Sprintf("%s is a TTL index with expireAfterSeconds %d, not 0: expired sessions stay %d s longer "+
			"(never served)", exp.Name, *exp.TTL, *exp.TTL))
	default:
		r.Mode = ModeGC
		r.Notes = append(r.Notes, exp.Name+" is a plain index: a store in GC mode (ExpiryGC, or ExpiryAuto where the server "+
			"has no TTL indexes) deletes expired sessions every GCInterval, or a job calls DeleteExpired")
	}
	if exp := r.ExpiresAt; exp != nil && exp.Name != setup.ExpiresAtIndexName {
		r.Notes = append(r.Notes, fmt.Sprintf("the index on expiresAt is called %s, not %s: it is not the store's own, "+
			"so the store never drops or replaces it", exp.Name, setup.ExpiresAtIndexName))
	}
	if exp := r.ExpiresAt; exp != nil && !exp.Ascending {
		r.Notes = append(r.Notes, fmt.Sprintf("%s is %s, not {expiresAt: 1} (it serves the store's queries as well)", exp.Name, exp.Key))
	}
	r.checkOwner(kind)
	return r
}

// checkOwner adds what the owner index, and those of earlier formats, on
// a server of kind, say.
func (r *Review) checkOwner(kind string) {
	name, field := setup.OwnerIndexName, setup.FieldOwner
	i := slices.IndexFunc(r.Indexes, func(idx setup.Index) bool { return idx.Name == name })
	switch {
	case i < 0 && setup.ServesOwners(r.Indexes, kind == setup.FerretDB1):
		r.Notes = append(r.Notes, "no "+name+" index: the application's index on "+field+" serves the listing of a user's sessions")
	case i < 0:
		r.Problems = append(r.Problems, "no "+name+" index: listing or ending a user's sessions scans the collection")
	case !r.Indexes[i].On(field) || !r.Indexes[i].Ascending:
		r.Problems = append(r.Problems, fmt.Sprintf("%s is %s, not {%s: 1}: the store finds it by name and does not change it; "+
			"drop it and let NewStore create it", name, r.Indexes[i].Key, field))
	case !r.Indexes[i].Partial && kind == setup.FerretDB1:
		r.Notes = append(r.Notes, name+" is not partial: FerretDB v1 refuses partial indexes (and drops the sparse option)")
	case !r.Indexes[i].Partial:
		r.Problems = append(r.Problems, name+" is not partial: it holds an entry for every session, and every save pays for it")
	}
	for _, idx := range r.Indexes {
		switch {
		case idx.IsFormat1Owner(kind == setup.FerretDB1):
			r.Notes = append(r.Notes, idx.Name+" is an owner index of format 1: NewStore drops it")
		case idx.Name == setup.LineageIndexName:
			r.Notes = append(r.Notes, idx.Name+" is the lineage index of format 2: NewStore drops it")
		}
	}
}

// sessionFields are the fields of a session document and their types (0:
// an integer), as the store reads them (collection.go parseDocument):
// formats 1, 2 (which adds lineage) and 3 (which adds sid) have them all,
// and v.
var sessionFields = map[string]bson.Type{"rev": 0, "data": bson.TypeBinary, "mac": bson.TypeBinary, "createdAt": bson.TypeDateTime,
	"updatedAt": bson.TypeDateTime, setup.FieldExpiresAt: bson.TypeDateTime, "maxAge": 0}

// IsSessionDocument reports whether doc has the shape of a session
// document, whatever the keys that wrote it: v 1, 2 or 3 (with sid), and sessionFields;
// it may have others. It tells the store's collection from another.
func IsSessionDocument(doc bson.Raw) bool {
	v, ok := doc.Lookup("v").AsInt64OK()
	if !ok || v < 1 || v > 3 {
		return false
	}
	if _, ok := doc.Lookup("sid").StringValueOK(); v == 3 && !ok {
		return false
	}
	for name, typ := range sessionFields {
		v := doc.Lookup(name)
		if _, isInt := v.AsInt64OK(); (typ == 0 && !isInt) || (typ != 0 && v.Type != typ) {
			return false
		}
	}
	return true
}
