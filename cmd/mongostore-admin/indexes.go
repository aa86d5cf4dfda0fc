package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Expiry modes, as the indexes imply them.
const (
	modeTTL  = "TTL"
	modeGC   = "GC"
	modeNone = "none"
)

// indexReport is what the indexes say about the collection.
type indexReport struct {
	Indexes []setup.Index `json:"indexes"`
	// Mode is the expiry mode the indexes imply: TTL (a TTL index on
	// expiresAt), GC (a plain index: a store in GC mode, or a job calling
	// DeleteExpired) or none.
	Mode string `json:"mode"`
	// ExpiresAt is the index on expiresAt the store uses, if any.
	ExpiresAt *setup.Index `json:"-"`
	// Problems are differences from what the store expects.
	Problems []string `json:"problems,omitempty"`
	// Notes explain the mode.
	Notes []string `json:"notes,omitempty"`
}

// listIndexes returns the collection's indexes; none if it does not exist.
func listIndexes(ctx context.Context, coll *mongo.Collection) ([]setup.Index, error) {
	cur, err := coll.Indexes().List(ctx)
	if setup.HasCode(err, setup.CodeNamespaceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	var specs []bson.Raw
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list the indexes of %s: %w", coll.Name(), err)
	}
	return setup.ParseIndexes(specs), nil
}

// analyzeIndexes says which expiry mode indexes imply and how they differ
// from what the store expects, on a server of kind.
func analyzeIndexes(indexes []setup.Index, kind string) indexReport {
	r := indexReport{Indexes: indexes, Mode: modeNone, ExpiresAt: setup.FindExpiresAt(indexes)}
	switch exp := r.ExpiresAt; {
	case exp == nil:
		r.Problems = append(r.Problems, "no index on expiresAt: every sweep (DeleteExpired) scans the collection, "+
			"and nothing deletes expired sessions unless a job calls DeleteExpired; NewStore creates "+setup.ExpiresAtIndexName+
			" unless Config.Expiry is ExpiryNone")
	case exp.IsTTL():
		r.Mode = modeTTL
		r.Notes = append(r.Notes, exp.Name+" is a TTL index with expireAfterSeconds 0: the server deletes each session at its expiresAt")
	case exp.TTL != nil:
		r.Mode = modeTTL
		r.Problems = append(r.Problems, fmt.Sprintf("%s is a TTL index with expireAfterSeconds %d, not 0: expired sessions stay %d s longer "+
			"(never served); NewStore in ExpiryAuto or ExpiryTTL changes it with collMod, or fails where the server refuses collMod",
			exp.Name, *exp.TTL, *exp.TTL))
	default:
		r.Mode = modeGC
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

// checkOwner adds what the owner index, on a server of kind, says.
func (r *indexReport) checkOwner(kind string) {
	const name = setup.OwnerIndexName
	i := slices.IndexFunc(r.Indexes, func(idx setup.Index) bool { return idx.Name == name })
	switch {
	case i < 0:
		r.Problems = append(r.Problems, "no "+name+" index: listing or ending a user's sessions scans the collection; "+
			"NewStore creates it unless Config.Expiry is ExpiryNone")
	case !r.Indexes[i].On(setup.FieldOwner) || !r.Indexes[i].Ascending:
		r.Problems = append(r.Problems, fmt.Sprintf("%s is %s, not {owner: 1}: the store finds it by name and does not change it; "+
			"drop it and let NewStore create it", name, r.Indexes[i].Key))
	case !r.Indexes[i].Sparse && kind == setup.FerretDB1:
		r.Notes = append(r.Notes, name+" is not sparse: FerretDB v1 ignores the option")
	case !r.Indexes[i].Sparse:
		r.Problems = append(r.Problems, name+" is not sparse: it holds an entry for every session, owned or not "+
			"(it works; it costs space)")
	}
}

// describeIndex says in a few words what idx is.
func describeIndex(idx setup.Index) string {
	s := idx.Key
	if idx.TTL != nil {
		s += fmt.Sprintf(", TTL expireAfterSeconds %d", *idx.TTL)
	}
	if idx.Sparse {
		s += ", sparse"
	}
	return s
}
