// Package plan reads the winning plan of an explain, whichever server
// answered it: MongoDB, FerretDB v2 with DocumentDB (a PostgreSQL plan) or
// FerretDB v1 (SQLite's plan lines). The scale benchmark says with it how
// the server lists a user's sessions.
package plan

import (
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Plan is what an explain says about how the server reads a query.
type Plan struct {
	// Indexes are the indexes the plan reads.
	Indexes []string `json:"indexes,omitempty"`
	// Stages are the stages that read the collection or an index: MongoDB's
	// (IXSCAN, COLLSCAN, IDHACK, …), PostgreSQL's under DocumentDB (Index
	// Scan, Seq Scan, …) or SQLite's under FerretDB v1 (SCAN, SEARCH).
	Stages []string `json:"stages,omitempty"`
	// Scan says the plan reads the whole collection.
	Scan bool `json:"collectionScan"`
	// Pushdown is FerretDB v1's filterPushdown: whether it passed the
	// filter to SQLite (nil elsewhere).
	Pushdown *bool `json:"filterPushdown,omitempty"`
}

// Read reads the winning plan of an explain, whichever server
// answered it: MongoDB (queryPlanner.winningPlan, per shard through
// mongos), FerretDB v2 with DocumentDB (a PostgreSQL plan) or FerretDB v1
// (SQLite's plan lines).
func Read(explain bson.Raw) Plan {
	var p Plan
	if b, ok := explain.Lookup("filterPushdown").BooleanOK(); ok {
		p.Pushdown = &b
	}
	qp, _ := explain.Lookup("queryPlanner").DocumentOK()
	if qp == nil {
		qp = explain
	}
	walkPlan(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: qp}, &p)
	return p
}

// skippedPlanFields hold plans the server did not choose, or a second
// description of the chosen one.
var skippedPlanFields = []string{"rejectedPlans", "slotBasedPlan", "command", "serverInfo", "parsedQuery"}

func walkPlan(v bson.RawValue, p *Plan) {
	switch v.Type {
	case bson.TypeArray:
		vals, _ := v.Array().Values()
		for _, e := range vals {
			if s, ok := e.StringValueOK(); ok {
				p.sqlite(s)
				continue
			}
			walkPlan(e, p)
		}
	case bson.TypeEmbeddedDocument:
		doc := v.Document()
		if stage, ok := doc.Lookup("stage").StringValueOK(); ok {
			p.mongo(stage, doc)
		}
		if node, ok := doc.Lookup("Node Type").StringValueOK(); ok {
			p.postgres(node, doc)
		}
		elems, _ := doc.Elements()
		for _, e := range elems {
			if !slices.Contains(skippedPlanFields, e.Key()) {
				walkPlan(e.Value(), p)
			}
		}
	}
}

func (p *Plan) add(stage, index string) {
	if !slices.Contains(p.Stages, stage) {
		p.Stages = append(p.Stages, stage)
	}
	if index != "" && !slices.Contains(p.Indexes, index) {
		p.Indexes = append(p.Indexes, index)
	}
}

// mongo records a stage of MongoDB's plan.
func (p *Plan) mongo(stage string, doc bson.Raw) {
	switch {
	case stage == "COLLSCAN":
		p.Scan = true
		p.add(stage, "")
	case stage == "IDHACK" || stage == "EXPRESS_IDHACK":
		p.add(stage, "_id_")
	case strings.HasSuffix(stage, "IXSCAN") || stage == "COUNT_SCAN" || stage == "DISTINCT_SCAN":
		name, _ := doc.Lookup("indexName").StringValueOK()
		if name == "" {
			if kp, ok := doc.Lookup("keyPattern").DocumentOK(); ok {
				name = kp.String()
			}
		}
		p.add(stage, name)
	case stage == "EOF":
		p.add(stage, "") // no collection: nothing to read
	}
}

// postgres records a node of DocumentDB's PostgreSQL plan.
func (p *Plan) postgres(node string, doc bson.Raw) {
	switch {
	case node == "Seq Scan":
		p.Scan = true
		p.add(node, "")
	case strings.Contains(node, "Index"):
		name, _ := doc.Lookup("Index Name").StringValueOK()
		p.add(node, name)
	}
}

// sqlite records a line of FerretDB v1's SQLite plan, such as
// "id=2 parent=0 notused=0 detail=SCAN s_f60c4582" or
// "… detail=SEARCH t USING INDEX t__id_ (…)".
func (p *Plan) sqlite(line string) {
	_, detail, ok := strings.Cut(line, "detail=")
	if !ok {
		return
	}
	switch {
	case strings.HasPrefix(detail, "SCAN ") && !strings.Contains(detail, " USING "):
		p.Scan = true
		p.add("SQLite "+detail, "")
	case strings.Contains(detail, " USING "):
		_, idx, _ := strings.Cut(detail, " INDEX ")
		idx, _, _ = strings.Cut(idx, " ")
		p.add("SQLite "+detail, idx)
	}
}

// String says how the plan reads: "index _id_ (IDHACK)", "collection scan
// (COLLSCAN)".
func (p Plan) String() string {
	stages := strings.Join(p.Stages, ", ")
	switch {
	case len(p.Indexes) > 0 && !p.Scan:
		return "index " + strings.Join(p.Indexes, ", ") + " (" + stages + ")"
	case p.Scan:
		s := "collection scan (" + stages + ")"
		if p.Pushdown != nil && *p.Pushdown {
			s += ", filter pushed down to SQLite"
		}
		return s
	case slices.Contains(p.Stages, "EOF"):
		return "nothing to read (EOF: the collection does not exist)"
	case stages != "":
		return stages
	}
	return "unknown (the explain output names no stage)"
}

// Uses reports whether the plan reads the index name, and no whole
// collection.
func (p Plan) Uses(name string) bool { return slices.Contains(p.Indexes, name) && !p.Scan }
