package main

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Server kinds, from buildInfo.
const (
	kindMongoDB   = "MongoDB"
	kindFerretDB1 = "FerretDB v1"
	kindFerretDB2 = "FerretDB v2"
)

// serverInfo is what buildInfo and hello say about the server.
type serverInfo struct {
	// Kind is MongoDB, FerretDB v1 (buildInfo has ferretdbVersion) or
	// FerretDB v2 (buildInfo has a ferretdb document).
	Kind string `json:"kind"`
	// Version is the server's version: FerretDB's own for FerretDB.
	Version string `json:"version"`
	// MongoDBVersion is the MongoDB version the server claims.
	MongoDBVersion string `json:"mongodbVersion"`
	// Topology: standalone, replica set NAME, or sharded (mongos).
	Topology string `json:"topology"`
}

func (s serverInfo) String() string {
	if s.Kind == kindMongoDB {
		return "MongoDB " + s.Version + ", " + s.Topology
	}
	name := "FerretDB " + s.Version
	if s.Version == unknownVersion {
		name = s.Kind + " " + unknownVersion
	}
	if s.Kind == kindFerretDB2 {
		name += " on PostgreSQL with DocumentDB"
	}
	return name + " (claims MongoDB " + s.MongoDBVersion + "), " + s.Topology
}

const unknownVersion = "(version unknown)"

// exactIDOnly reports whether the server uses an index for exactly
// {_id: …} only, and the store's saves are shaped for that (FerretDB v1).
func (s serverInfo) exactIDOnly() bool { return s.Kind == kindFerretDB1 }

// getServerInfo asks the server what it is, as NewStore does.
func getServerInfo(ctx context.Context, db *mongo.Database) (serverInfo, error) {
	info := serverInfo{Kind: kindMongoDB, Topology: "standalone"}
	raw, err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil && !unsupported(err) {
		return info, fmt.Errorf("buildInfo: %w", err)
	}
	if v, ok := raw.Lookup("version").StringValueOK(); ok {
		info.Version, info.MongoDBVersion = v, v
	}
	if v, ok := raw.Lookup("ferretdbVersion").StringValueOK(); ok {
		info.Kind, info.Version = kindFerretDB1, v
	} else if fd, ok := raw.Lookup("ferretdb").DocumentOK(); ok {
		info.Kind = kindFerretDB2
		info.Version, _ = fd.Lookup("version").StringValueOK()
	}
	if info.Version == "" || info.Version == "unknown" { // FerretDB built without its version
		info.Version = unknownVersion
	}
	if info.MongoDBVersion == "" {
		info.MongoDBVersion = unknownVersion
	}
	hello, err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return info, fmt.Errorf("hello: %w", err)
	}
	if msg, _ := hello.Lookup("msg").StringValueOK(); msg == "isdbgrid" {
		info.Topology = "sharded cluster (through mongos)"
	} else if set, ok := hello.Lookup("setName").StringValueOK(); ok {
		info.Topology = "replica set " + set
	}
	return info, nil
}

// Server error codes.
const (
	codeCommandNotFound     = 59
	codeCommandNotSupported = 115
	codeNotImplemented      = 238
)

// unsupported reports whether err says the server does not implement what
// was asked (as the store reads it).
func unsupported(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.HasErrorCode(codeNotImplemented) || se.HasErrorCode(codeCommandNotSupported) || se.HasErrorCode(codeCommandNotFound)
}

// serverError reports whether err is the server's answer, not a network
// failure or a timeout.
func serverError(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se)
}
