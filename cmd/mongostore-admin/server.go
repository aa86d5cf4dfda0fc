package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// serverInfo is what buildInfo and hello say about the server.
type serverInfo struct {
	// Kind is MongoDB, FerretDB v1 or FerretDB v2 (setup.ParseBuildInfo).
	Kind string `json:"kind"`
	// Version is the server's version: FerretDB's own for FerretDB.
	Version string `json:"version"`
	// MongoDBVersion is the MongoDB version the server claims.
	MongoDBVersion string `json:"mongodbVersion"`
	// Topology: standalone, replica set NAME, or sharded (mongos).
	Topology string `json:"topology"`
}

func (s serverInfo) String() string {
	if s.Kind == setup.MongoDB {
		return "MongoDB " + s.Version + ", " + s.Topology
	}
	name := "FerretDB " + s.Version
	if s.Version == unknownVersion {
		name = s.Kind + " " + unknownVersion
	}
	if s.Kind == setup.FerretDB2 {
		name += " on PostgreSQL with DocumentDB"
	}
	return name + " (claims MongoDB " + s.MongoDBVersion + "), " + s.Topology
}

const unknownVersion = "(version unknown)"

// getServerInfo asks the server what it is, as NewStore does.
func getServerInfo(ctx context.Context, db *mongo.Database) (serverInfo, error) {
	raw, err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil && !setup.Unsupported(err) {
		return serverInfo{}, fmt.Errorf("buildInfo: %w", err)
	}
	b := setup.ParseBuildInfo(raw)
	info := serverInfo{Kind: b.Kind, Version: b.Version, MongoDBVersion: b.MongoDBVersion, Topology: "standalone"}
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

// serverAnswer shows a server's error with its code.
func serverAnswer(err error) string {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return fmt.Sprintf("code %d (%s): %s", ce.Code, ce.Name, ce.Message)
	}
	return err.Error()
}
