package review

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongostore/mongostore/internal/setup"
)

func mustIndex(t *testing.T, ext string) setup.Index {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(ext), false, &raw); err != nil {
		t.Fatal(err)
	}
	return setup.ParseIndex(raw)
}

func TestReviewIndexes(t *testing.T) {
	spec := func(ext string) setup.Index { return mustIndex(t, ext) }
	id := spec(`{"v": 2, "key": {"_id": 1}, "name": "_id_"}`)
	owner := spec(`{"v": 2, "key": {"owner": 1}, "name": "owner_present", "partialFilterExpression": {"owner": {"$exists": true}}}`)
	lineage := spec(`{"v": 2, "key": {"lineage": 1}, "name": "lineage_present", "partialFilterExpression": {"lineage": {"$exists": true}}}`)
	ttl := spec(`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 0}`)
	plain := spec(`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1"}`)
	tests := []struct {
		name     string
		indexes  []setup.Index
		mode     string
		problems []string
	}{
		{"TTL", []setup.Index{id, ttl, owner, lineage}, ModeTTL, nil},
		{"GC", []setup.Index{id, plain, owner, lineage}, ModeGC, nil},
		{"TTL preferred", []setup.Index{id, spec(`{"key": {"expiresAt": -1}, "name": "e"}`), ttl, owner, lineage}, ModeTTL, nil},
		{"none", []setup.Index{id}, ModeNone, []string{"no index on expiresAt", "no owner_present index"}},
		{"TTL of an hour", []setup.Index{id, spec(`{"key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 3600}`), owner, lineage},
			ModeTTL, []string{"expireAfterSeconds 3600, not 0"}},
		{"owner not partial", []setup.Index{id, ttl, spec(`{"key": {"owner": 1}, "name": "owner_present", "sparse": true}`), lineage}, ModeTTL,
			[]string{"owner_present is not partial"}},
		{"owner compound", []setup.Index{id, ttl, spec(`{"key": {"owner": 1, "expiresAt": 1}, "name": "owner_present"}`), lineage}, ModeTTL,
			[]string{"owner_present is {owner: 1, expiresAt: 1}, not {owner: 1}"}},
		{"format 1's owner index left", []setup.Index{id, ttl, spec(`{"key": {"owner": 1}, "name": "owner_1", "sparse": true}`), owner, lineage}, ModeTTL, nil},
		{"the application's owner index", []setup.Index{id, ttl, spec(`{"key": {"owner": 1}, "name": "owner_1", "unique": true}`)}, ModeTTL, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ReviewIndexes(tt.indexes, setup.MongoDB)
			if r.Mode != tt.mode || len(r.Problems) != len(tt.problems) {
				t.Fatalf("mode %s, problems %q; want %s, %d problems", r.Mode, r.Problems, tt.mode, len(tt.problems))
			}
			for i, p := range tt.problems {
				if !strings.Contains(r.Problems[i], p) {
					t.Errorf("problem %q does not say %q", r.Problems[i], p)
				}
			}
		})
	}
}

// TestReviewNotesOldIndexes: the owner indexes of format 1 and format 2's
// lineage index are noted, each by name, as indexes NewStore drops.
func TestReviewNotesOldIndexes(t *testing.T) {
	indexes := []setup.Index{mustIndex(t, `{"key": {"owner": 1}, "name": "owner_1", "sparse": true}`),
		mustIndex(t, `{"key": {"owner": 1, "expiresAt": 1}, "name": "owner_1_expiresAt_1", "partialFilterExpression": {"owner": {"$exists": true}}}`),
		mustIndex(t, `{"key": {"lineage": 1}, "name": "lineage_present", "sparse": true}`),
		mustIndex(t, `{"key": {"owner": 1, "expiresAt": 1}, "name": "oe"}`)}
	notes := strings.Join(ReviewIndexes(indexes, setup.MongoDB).Notes, "\n")
	for _, want := range []string{"owner_1 is an owner index of format 1: NewStore drops it",
		"owner_1_expiresAt_1 is an owner index of format 1: NewStore drops it", "lineage_present is the lineage index of format 2: NewStore drops it"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "oe ") {
		t.Errorf("an application's index is noted as dropped:\n%s", notes)
	}
}

func TestIsSessionDocument(t *testing.T) {
	now := bson.NewDateTimeFromTime(time.Now())
	bin := bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte{1}}
	session := func(v any, drop string, extra ...bson.E) bson.Raw {
		d := bson.D{{Key: "_id", Value: "x"}, {Key: "v", Value: v}, {Key: "rev", Value: int64(1)}, {Key: "data", Value: bin},
			{Key: "mac", Value: bin}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now}, {Key: "expiresAt", Value: now},
			{Key: "maxAge", Value: int64(86400)}}
		d = slices.DeleteFunc(append(d, extra...), func(e bson.E) bool { return e.Key == drop })
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name string
		doc  bson.Raw
		want bool
	}{
		{"format 1", session(int32(1), ""), true},
		{"format 1, owned", session(int32(1), "", bson.E{Key: "owner", Value: "digest"}), true},
		{"format 2, with lineage", session(int64(2), "", bson.E{Key: "lineage", Value: bson.A{"a"}}), true},
		{"format 3", session(int32(3), "", bson.E{Key: "sid", Value: "hash"}), true},
		{"format 3 without sid", session(int32(3), ""), false},
		{"format 4", session(int32(4), "", bson.E{Key: "sid", Value: "hash"}), false},
		{"no v", session(int32(1), "v"), false},
		{"no mac", session(int32(1), "mac"), false},
		{"no maxAge", session(int32(1), "maxAge"), false},
		{"expiresAt a string", session(int32(1), "expiresAt", bson.E{Key: "expiresAt", Value: "tomorrow"}), false},
		{"a user", mustMarshal(t, bson.D{{Key: "name", Value: "ada"}, {Key: "v", Value: 1}, {Key: "expiresAt", Value: now}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsSessionDocument(tc.doc); got != tc.want {
				t.Errorf("IsSessionDocument(%s) = %v, want %v", tc.doc, got, tc.want)
			}
		})
	}
}

func mustMarshal(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
