// Package serverinfo tells which server a client talks to, MongoDB or
// FerretDB and their versions, for the reports of the benchmarks
// (cmd/scale, cmd/loadbench).
package serverinfo

import (
	"context"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Info is what buildInfo says about a server.
type Info struct {
	Version         string // the MongoDB version it reports
	FerretDB        bool   // the server is FerretDB
	FerretDBVersion string // "" if it does not say
}

// Describe runs buildInfo. FerretDB adds its own fields: v1 a
// top-level ferretdbVersion (and ferretdbFeatures), v2 a ferretdb document
// with a version.
func Describe(ctx context.Context, client *mongo.Client) (Info, error) {
	var info Info
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return info, fmt.Errorf("buildInfo: %w", err)
	}
	info.Version, _ = raw.Lookup("version").StringValueOK()
	elems, err := raw.Elements()
	if err != nil {
		return info, fmt.Errorf("buildInfo: %w", err)
	}
	for _, e := range elems {
		key := strings.ToLower(e.Key())
		if !strings.HasPrefix(key, "ferretdb") {
			continue
		}
		info.FerretDB = true
		switch key {
		case "ferretdbversion": // FerretDB v1
			if v, ok := e.Value().StringValueOK(); ok && v != "unknown" {
				info.FerretDBVersion = v
			} else if info.FerretDBVersion == "" {
				info.FerretDBVersion = "v1"
			}
		case "ferretdb": // FerretDB v2
			if doc, ok := e.Value().DocumentOK(); ok {
				if v, ok := doc.Lookup("version").StringValueOK(); ok {
					info.FerretDBVersion = v
				}
			}
		}
	}
	return info, nil
}

// String describes the server in full.
func (i Info) String() string {
	if !i.FerretDB {
		return fmt.Sprintf("MongoDB %s (buildInfo has no FerretDB fields)", i.Version)
	}
	v := i.FerretDBVersion
	if v == "" {
		v = "(version not reported)"
	}
	return fmt.Sprintf("FerretDB %s, reporting MongoDB %s", v, i.Version)
}

// Short describes the server for the table.
func (i Info) Short() string {
	if !i.FerretDB {
		return "MongoDB " + i.Version
	}
	v := i.FerretDBVersion
	if v == "" {
		v = "?"
	}
	return fmt.Sprintf("FerretDB %s (%s)", v, i.Version)
}
