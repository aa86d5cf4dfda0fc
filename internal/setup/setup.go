// Package setup holds what the store expects of a sessions collection and
// the decisions NewStore takes when it prepares one, as pure functions of
// what the server says: which answers mean "not supported", whether the
// server is FerretDB v1, which index on expiresAt is the store's, and what
// to do about it (Decide).
//
// The store sends the commands (collection.go) and follows Decide
// (setup.go); mongostore-admin feeds Decide the answers of its trials on a
// scratch collection to say what NewStore will do, and reviews collections
// with package review. Neither has a copy of these rules.
package setup

import (
	"errors"
	"slices"
	"strings"
	"unicode"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The store's indexed fields, its index names, and the TTL index's
// expireAfterSeconds. The owner index is partial (sparse on FerretDB v1):
// an entry only for the documents that have the field.
const (
	FieldExpiresAt        = "expiresAt"
	FieldOwner            = "owner"
	ExpiresAtIndexName    = FieldExpiresAt + "_1"
	OwnerIndexName        = "owner_present"
	LineageIndexName      = "lineage_present"                          // format 2's, dropped by NewStore
	SparseOwnerIndexName  = FieldOwner + "_1"                          // format 1's, dropped by NewStore
	EarlyOwnerIndexName   = FieldOwner + "_1_" + FieldExpiresAt + "_1" // format 1's first commits', dropped by NewStore
	TTLExpireAfterSeconds = 0
)

// Server error codes the store recognises.
const (
	CodeInternalError         = 1
	CodeUnauthorized          = 13
	CodeNamespaceNotFound     = 26
	CodeIndexNotFound         = 27
	CodeCommandNotFound       = 59
	CodeCommandNotSupported   = 115
	CodeNotImplemented        = 238
	CodeIndexOptionsConflict  = 85
	CodeIndexKeySpecsConflict = 86
	CodeWriteConflict         = 112
	CodeIndexBuildInProgress  = 276
)

// HasCode reports whether err is a server error with code.
func HasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

// Unsupported reports whether err says the server does not implement what
// was asked.
func Unsupported(err error) bool {
	return HasCode(err, CodeNotImplemented) || HasCode(err, CodeCommandNotSupported) || HasCode(err, CodeCommandNotFound)
}

// TTLRefused reports whether err, a server's answer to a TTL index on
// expiresAt, means it does not support one: a code saying so, or a message
// about TTL or expireAfterSeconds (Azure Cosmos DB for MongoDB, RU,
// accepts a TTL index on _ts only). A network failure or timeout is not an
// answer, nor a conflict with another index or a refused authorization,
// whose messages may quote the spec.
func TTLRefused(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) || IndexConflict(err) || HasCode(err, CodeUnauthorized) {
		return false
	}
	msg := strings.ToLower(se.Error())
	words := strings.FieldsFunc(msg, func(r rune) bool { return !unicode.IsLetter(r) }) // "ttl", not "battleship"
	return Unsupported(err) || strings.Contains(msg, "expireafterseconds") || slices.Contains(words, "ttl") ||
		strings.Contains(msg, "not supported")
}

// IndexConflict reports whether err is a conflict with an existing index
// (IndexOptionsConflict, IndexKeySpecsConflict).
func IndexConflict(err error) bool {
	return HasCode(err, CodeIndexOptionsConflict) || HasCode(err, CodeIndexKeySpecsConflict)
}

// Raced reports whether err, from an index command, may come from another
// instance setting up the same collection at the same moment: an index
// conflict, an index gone or still being built, a write conflict, or a
// deadlock (DocumentDB, when two drop one index).
func Raced(err error) bool {
	var se mongo.ServerError
	return IndexConflict(err) || HasCode(err, CodeIndexNotFound) || HasCode(err, CodeWriteConflict) ||
		HasCode(err, CodeIndexBuildInProgress) ||
		HasCode(err, CodeInternalError) && errors.As(err, &se) && strings.Contains(strings.ToLower(se.Error()), "deadlock")
}

// IsAnswer reports whether err is the server's answer, not a network
// failure or a timeout.
func IsAnswer(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se)
}

// Server kinds, from buildInfo.
const (
	MongoDB   = "MongoDB"
	FerretDB1 = "FerretDB v1" // buildInfo has a ferretdbVersion field
	FerretDB2 = "FerretDB v2" // buildInfo has a ferretdb document
)

// BuildInfo is what a server's answer to buildInfo says it is.
type BuildInfo struct {
	Kind string // MongoDB, FerretDB1 or FerretDB2
	// Version is the server's own version, FerretDB's for FerretDB ("" if
	// it does not say, or says "unknown"); MongoDBVersion the MongoDB
	// version it claims.
	Version, MongoDBVersion string
}

// ParseBuildInfo reads an answer to buildInfo; a nil one (a server that
// refuses buildInfo) is MongoDB's of no version.
func ParseBuildInfo(raw bson.Raw) BuildInfo {
	b := BuildInfo{Kind: MongoDB}
	b.MongoDBVersion, _ = raw.Lookup("version").StringValueOK()
	b.Version = b.MongoDBVersion
	if v, ok := raw.Lookup("ferretdbVersion").StringValueOK(); ok {
		b.Kind, b.Version = FerretDB1, v
	} else if fd, ok := raw.Lookup("ferretdb").DocumentOK(); ok {
		b.Kind = FerretDB2
		b.Version, _ = fd.Lookup("version").StringValueOK()
	}
	if b.Version == "unknown" { // FerretDB built without its version
		b.Version = ""
	}
	return b
}

// ExactIDOnly reports whether the server uses an index for exactly
// {_id: …} only, and has no atomic conditional update, so that the store
// shapes its saves for that: FerretDB v1.
func (b BuildInfo) ExactIDOnly() bool { return b.Kind == FerretDB1 }
