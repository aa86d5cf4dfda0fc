package loadbench

import (
	"context"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// This file is cmd/scale's server.go: a command cannot be imported.

// serverInfo is what buildInfo says about the server.
type serverInfo struct {
	version         string // the MongoDB version it reports
	ferretDB        bool
	ferretDBVersion string // "" if it does not say
}

// describeServer runs buildInfo. FerretDB adds its own fields: v1 a
// top-level ferretdbVersion (and ferretdbFeatures), v2 a ferretdb document
// with a version.
func describeServer(ctx context.Context, client *mongo.Client) (serverInfo, error) {
	var info serverInfo
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return info, fmt.Errorf("buildInfo: %w", err)
	}
	info.version, _ = raw.Lookup("version").StringValueOK()
	elems, err := raw.Elements()
	if err != nil {
		return info, fmt.Errorf("buildInfo: %w", err)
	}
	for _, e := range elems {
		key := strings.ToLower(e.Key())
		if !strings.HasPrefix(key, "ferretdb") {
			continue
		}
		info.ferretDB = true
		switch key {
		case "ferretdbversion": // FerretDB v1
			if v, ok := e.Value().StringValueOK(); ok && v != "unknown" {
				info.ferretDBVersion = v
			} else if info.ferretDBVersion == "" {
				info.ferretDBVersion = "v1"
			}
		case "ferretdb": // FerretDB v2
			if doc, ok := e.Value().DocumentOK(); ok {
				if v, ok := doc.Lookup("version").StringValueOK(); ok {
					info.ferretDBVersion = v
				}
			}
		}
	}
	return info, nil
}

// String describes the server in full.
func (i serverInfo) String() string {
	if !i.ferretDB {
		return fmt.Sprintf("MongoDB %s (buildInfo has no FerretDB fields)", i.version)
	}
	v := i.ferretDBVersion
	if v == "" {
		v = "(version not reported)"
	}
	return fmt.Sprintf("FerretDB %s, reporting MongoDB %s", v, i.version)
}

// short describes the server for the table.
func (i serverInfo) short() string {
	if !i.ferretDB {
		return "MongoDB " + i.version
	}
	v := i.ferretDBVersion
	if v == "" {
		v = "?"
	}
	return fmt.Sprintf("FerretDB %s (%s)", v, i.version)
}
