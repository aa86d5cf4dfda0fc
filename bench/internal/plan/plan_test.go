package plan

import (
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Explain outputs of each server, cut down to what readPlan reads.
var explains = []struct {
	name    string
	explain string
	indexes []string
	scan    bool
	text    string
}{
	{"MongoDB IDHACK", `{"queryPlanner": {"winningPlan": {"stage": "IDHACK"}, "rejectedPlans": []}}`,
		[]string{"_id_"}, false, "index _id_ (IDHACK)"},
	{"MongoDB 8 express", `{"queryPlanner": {"winningPlan": {"isCached": false, "stage": "EXPRESS_IXSCAN", "keyPattern": "{ _id: 1 }", "indexName": "_id_"}}}`,
		[]string{"_id_"}, false, "index _id_ (EXPRESS_IXSCAN)"},
	{"MongoDB IXSCAN under FETCH", `{"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "keyPattern": {"owner": 1}, "indexName": "owner_1"}},
		"rejectedPlans": [{"stage": "COLLSCAN"}]}}`, []string{"owner_1"}, false, "index owner_1 (IXSCAN)"},
	{"MongoDB SBE", `{"queryPlanner": {"winningPlan": {"queryPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "expiresAt_1"}}, "slotBasedPlan": {"stages": "[1] ixseek"}}}}`,
		[]string{"expiresAt_1"}, false, "index expiresAt_1 (IXSCAN)"},
	{"MongoDB COLLSCAN", `{"queryPlanner": {"winningPlan": {"stage": "COLLSCAN", "filter": {"owner": {"$eq": "x"}}}}}`,
		nil, true, "collection scan (COLLSCAN)"},
	{"mongos", `{"queryPlanner": {"winningPlan": {"stage": "SHARD_MERGE", "shards": [
		{"shardName": "a", "winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "owner_1"}}},
		{"shardName": "b", "winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "owner_1"}}}]}}}`,
		[]string{"owner_1"}, false, "index owner_1 (IXSCAN)"},
	{"MongoDB no collection", `{"queryPlanner": {"winningPlan": {"stage": "EOF"}}}`, nil, false, "nothing to read (EOF: the collection does not exist)"},
	{"DocumentDB Index Scan", `{"queryPlanner": {"Plan": {"Node Type": "Index Scan", "Index Name": "_id_", "Relation Name": "documents_5193"}}}`,
		[]string{"_id_"}, false, "index _id_ (Index Scan)"},
	{"DocumentDB bitmap", `{"queryPlanner": {"Plan": {"Node Type": "Bitmap Heap Scan", "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": "owner_1"}]}}}`,
		[]string{"owner_1"}, false, "index owner_1 (Bitmap Index Scan)"},
	{"DocumentDB Seq Scan", `{"queryPlanner": {"Plan": {"Node Type": "Gather", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "documents_5196"}]}}}`,
		nil, true, "collection scan (Seq Scan)"},
	{"FerretDB v1 _id", `{"queryPlanner": {"Plan": ["id=2 parent=0 notused=0 detail=SCAN s_f60c4582"]}, "filterPushdown": true}`,
		nil, true, "collection scan (SQLite SCAN s_f60c4582), filter pushed down to SQLite"},
	{"FerretDB v1 other", `{"queryPlanner": {"Plan": ["id=2 parent=0 notused=0 detail=SCAN s_f60c4582"]}, "filterPushdown": false}`,
		nil, true, "collection scan (SQLite SCAN s_f60c4582)"},
	{"SQLite index", `{"queryPlanner": {"Plan": ["id=3 parent=0 notused=0 detail=SEARCH s USING INDEX s__id_ (_id=?)"]}}`,
		[]string{"s__id_"}, false, "index s__id_ (SQLite SEARCH s USING INDEX s__id_ (_id=?))"},
}

func TestReadPlan(t *testing.T) {
	for _, tt := range explains {
		t.Run(tt.name, func(t *testing.T) {
			var raw bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(tt.explain), false, &raw); err != nil {
				t.Fatal(err)
			}
			p := Read(raw)
			if !reflect.DeepEqual(p.Indexes, tt.indexes) || p.Scan != tt.scan || p.String() != tt.text {
				t.Errorf("readPlan = indexes %q, scan %v, %q; want %q, %v, %q", p.Indexes, p.Scan, p, tt.indexes, tt.scan, tt.text)
			}
		})
	}
}
