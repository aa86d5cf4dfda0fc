package setup

import (
	"fmt"
	"slices"
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
	Indexes   []Index  `json:"indexes"`
	Mode      string   `json:"mode"`
	ExpiresAt *Index   `json:"-"`
	Problems  []string `json:"problems,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// ReviewIndexes reviews indexes, on a server of kind. What NewStore would
// do about them depends on the server's answers too: Decide says.
func ReviewIndexes(indexes []Index, kind string) Review {
	r := Review{Indexes: indexes, Mode: ModeNone, ExpiresAt: FindExpiresAt(indexes)}
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
	if exp := r.ExpiresAt; exp != nil && exp.Name != ExpiresAtIndexName {
		r.Notes = append(r.Notes, fmt.Sprintf("the index on expiresAt is called %s, not %s: it is not the store's own, "+
			"so the store never drops or replaces it", exp.Name, ExpiresAtIndexName))
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
	for _, ix := range [...]struct{ name, field string }{{OwnerIndexName, FieldOwner}} {
		i := slices.IndexFunc(r.Indexes, func(idx Index) bool { return idx.Name == ix.name })
		switch {
		case i < 0:
			r.Problems = append(r.Problems, "no "+ix.name+" index: listing or ending a user's sessions scans the collection")
		case !r.Indexes[i].On(ix.field) || !r.Indexes[i].Ascending:
			r.Problems = append(r.Problems, fmt.Sprintf("%s is %s, not {%s: 1}: the store finds it by name and does not change it; "+
				"drop it and let NewStore create it", ix.name, r.Indexes[i].Key, ix.field))
		case !r.Indexes[i].Partial && kind == FerretDB1:
			r.Notes = append(r.Notes, ix.name+" is not partial: FerretDB v1 refuses partial indexes (and drops the sparse option)")
		case !r.Indexes[i].Partial:
			r.Problems = append(r.Problems, ix.name+" is not partial: it holds an entry for every session, and every save pays for it")
		}
	}
	if slices.ContainsFunc(r.Indexes, func(idx Index) bool { return idx.Name == SparseOwnerIndexName }) {
		r.Notes = append(r.Notes, SparseOwnerIndexName+" is the sparse owner index of format 1: NewStore drops it")
	}
	if slices.ContainsFunc(r.Indexes, func(idx Index) bool { return idx.Name == LineageIndexName }) {
		r.Notes = append(r.Notes, LineageIndexName+" is the lineage index of format 2: NewStore drops it")
	}
}
