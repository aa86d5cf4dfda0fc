package setup

import (
	"strings"
	"testing"
)

func TestReviewIndexes(t *testing.T) {
	spec := func(ext string) Index { return mustIndex(t, ext) }
	id := spec(`{"v": 2, "key": {"_id": 1}, "name": "_id_"}`)
	owner := spec(`{"v": 2, "key": {"owner": 1}, "name": "owner_present", "partialFilterExpression": {"owner": {"$exists": true}}}`)
	lineage := spec(`{"v": 2, "key": {"lineage": 1}, "name": "lineage_present", "partialFilterExpression": {"lineage": {"$exists": true}}}`)
	ttl := spec(`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 0}`)
	plain := spec(`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1"}`)
	tests := []struct {
		name     string
		indexes  []Index
		mode     string
		problems []string
	}{
		{"TTL", []Index{id, ttl, owner, lineage}, ModeTTL, nil},
		{"GC", []Index{id, plain, owner, lineage}, ModeGC, nil},
		{"TTL preferred", []Index{id, spec(`{"key": {"expiresAt": -1}, "name": "e"}`), ttl, owner, lineage}, ModeTTL, nil},
		{"none", []Index{id}, ModeNone, []string{"no index on expiresAt", "no owner_present index"}},
		{"TTL of an hour", []Index{id, spec(`{"key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 3600}`), owner, lineage},
			ModeTTL, []string{"expireAfterSeconds 3600, not 0"}},
		{"owner not partial", []Index{id, ttl, spec(`{"key": {"owner": 1}, "name": "owner_present", "sparse": true}`), lineage}, ModeTTL,
			[]string{"owner_present is not partial"}},
		{"owner compound", []Index{id, ttl, spec(`{"key": {"owner": 1, "expiresAt": 1}, "name": "owner_present"}`), lineage}, ModeTTL,
			[]string{"owner_present is {owner: 1, expiresAt: 1}, not {owner: 1}"}},
		{"format 1's owner index left", []Index{id, ttl, spec(`{"key": {"owner": 1}, "name": "owner_1", "sparse": true}`), owner, lineage}, ModeTTL, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ReviewIndexes(tt.indexes, MongoDB)
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
