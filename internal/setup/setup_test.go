package setup

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestTTLRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"FerretDB v1", mongo.CommandError{Code: 238, Name: "NotImplemented", Message: "Index option \"expireAfterSeconds\" is not implemented yet"}, true},
		{"Azure Cosmos DB for MongoDB (RU)", mongo.CommandError{Code: 67, Name: "CannotCreateIndex", Message: "The expireAfterSeconds option is supported on '_ts' field only."}, true},
		{"a TTL message under another code", mongo.CommandError{Code: 2, Name: "BadValue", Message: "TTL indexes are disabled on this cluster"}, true},
		{"command not supported", mongo.CommandError{Code: 115, Name: "CommandNotSupported", Message: "createIndexes"}, true},
		{"another index error", mongo.CommandError{Code: 85, Name: "IndexOptionsConflict", Message: "An equivalent index already exists with a different name"}, false},
		{"a conflict quoting the TTL spec", mongo.CommandError{Code: 85, Name: "IndexOptionsConflict",
			Message: "An existing index has the same name as the requested index. Requested index: { v: 2, key: { expiresAt: 1 }, name: \"expiresAt_1\", expireAfterSeconds: 0 }"}, false},
		{"a key conflict quoting the TTL spec", mongo.CommandError{Code: 86, Name: "IndexKeySpecsConflict",
			Message: "Index must have unique name. Requested index: { key: { expiresAt: 1 }, expireAfterSeconds: 0 }"}, false},
		{"not authorized", mongo.CommandError{Code: 13, Name: "Unauthorized", Message: "not authorized on db to execute command"}, false},
		{"not authorized, quoting the command", mongo.CommandError{Code: 13, Name: "Unauthorized",
			Message: "not authorized on app to execute command { createIndexes: \"sessions\", indexes: [ { key: { expiresAt: 1 }, expireAfterSeconds: 0 } ] }"}, false},
		{"ttl inside a word", mongo.CommandError{Code: 67, Name: "CannotCreateIndex", Message: "add index fails, too many indexes for battleship.sessions"}, false},
		{"a network failure", fmt.Errorf("database error: %w", errors.New("connection reset")), false},
		{"a timeout", context.DeadlineExceeded, false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TTLRefused(tc.err); got != tc.want {
				t.Fatalf("TTLRefused(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadlock (DocumentDB, two dropIndexes)", fmt.Errorf("drop index: %w", mongo.CommandError{Code: 1, Name: "InternalError", Message: "deadlock detected"}), true},
		{"another internal error", mongo.CommandError{Code: 1, Name: "InternalError", Message: "out of shared memory"}, false},
		{"index conflict", mongo.CommandError{Code: 85, Name: "IndexOptionsConflict"}, true},
		{"index key specs conflict", mongo.CommandError{Code: 86, Name: "IndexKeySpecsConflict"}, true},
		{"index gone", mongo.CommandError{Code: 27, Name: "IndexNotFound"}, true},
		{"write conflict", mongo.CommandError{Code: 112, Name: "WriteConflict"}, true},
		{"index build in progress", mongo.CommandError{Code: 276, Name: "IndexBuildAlreadyInProgress"}, true},
		{"not authorized", mongo.CommandError{Code: 13, Name: "Unauthorized"}, false},
		{"a timeout", context.DeadlineExceeded, false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Raced(tc.err); got != tc.want {
				t.Fatalf("Raced(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	notImplemented := fmt.Errorf("wrapped: %w", mongo.CommandError{Code: 238, Name: "NotImplemented"})
	invalidOptions := mongo.CommandError{Code: 72, Name: "InvalidOptions"}
	for _, tc := range []struct {
		name string
		err  error
		want Answer
		ok   bool
	}{
		{"accepted", nil, Accepted, true},
		{"refused", notImplemented, Refused, true},
		{"rejected", invalidOptions, Rejected, true},
		{"no answer", context.DeadlineExceeded, NotAsked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := Read(tc.err, Unsupported); got != tc.want || ok != tc.ok {
				t.Fatalf("Read(%v) = %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func mustIndex(t *testing.T, ext string) Index {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(ext), false, &raw); err != nil {
		t.Fatal(err)
	}
	return ParseIndex(raw)
}

func TestParseIndex(t *testing.T) {
	hour := int64(3600)
	for _, tc := range []struct {
		spec string
		want Index
	}{
		{`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1"}`,
			Index{Name: "expiresAt_1", Key: "{expiresAt: 1}", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true, Plain: true}},
		{`{"v": 2, "key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 3600}`,
			Index{Name: "expiresAt_1", Key: "{expiresAt: 1}", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true, TTL: &hour}},
		{`{"v": 2, "key": {"expiresAt": 1}, "name": "by_expiry"}`,
			Index{Name: "by_expiry", Key: "{expiresAt: 1}", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true}},
		{`{"v": 2, "key": {"expiresAt": -1}, "name": "expiresAt_1"}`,
			Index{Name: "expiresAt_1", Key: "{expiresAt: -1}", Fields: []string{"expiresAt"}, Ordered: true}},
		{`{"v": 2, "key": {"expiresAt": "hashed"}, "name": "expiresAt_hashed"}`,
			Index{Name: "expiresAt_hashed", Key: `{expiresAt: "hashed"}`, Fields: []string{"expiresAt"}}},
		{`{"v": 2, "key": {"owner": 1}, "name": "owner_1", "sparse": true}`,
			Index{Name: "owner_1", Key: "{owner: 1}", Fields: []string{"owner"}, Ascending: true, Ordered: true, Sparse: true, Format1Owner: true}},
		{`{"v": 2, "key": {"owner": 1}, "name": "owner_1"}`, // format 1's on FerretDB v1, which leaves sparse out
			Index{Name: "owner_1", Key: "{owner: 1}", Fields: []string{"owner"}, Ascending: true, Ordered: true, Format1Owner: true}},
		{`{"v": 2, "key": {"owner": 1}, "name": "owner_1", "unique": true}`, // the application's
			Index{Name: "owner_1", Key: "{owner: 1}", Fields: []string{"owner"}, Ascending: true, Ordered: true}},
		{`{"v": 2, "key": {"_id": "hashed"}, "name": "_id_hashed"}`,
			Index{Name: "_id_hashed", Key: `{_id: "hashed"}`, Fields: []string{"_id"}}},
		{`{"v": 2, "key": {"owner": 1, "expiresAt": 1}, "name": "oe"}`,
			Index{Name: "oe", Key: "{owner: 1, expiresAt: 1}", Fields: []string{"owner", "expiresAt"}}},
		{`{"v": 2, "key": {"owner": 1, "expiresAt": 1}, "name": "owner_1_expiresAt_1", "partialFilterExpression": {"owner": {"$exists": true}}}`,
			Index{Name: "owner_1_expiresAt_1", Key: "{owner: 1, expiresAt: 1}", Fields: []string{"owner", "expiresAt"}, Partial: true, Format1Owner: true}},
		{`{"v": 2, "key": {"owner": 1, "expiresAt": 1}, "name": "owner_1_expiresAt_1", "sparse": true}`, // format 1's first, where partial was refused
			Index{Name: "owner_1_expiresAt_1", Key: "{owner: 1, expiresAt: 1}", Fields: []string{"owner", "expiresAt"}, Sparse: true, Format1Owner: true}},
		{`{"v": 2, "key": {"owner": 1, "expiresAt": 1}, "name": "owner_1_expiresAt_1", "partialFilterExpression": {"owner": "a"}}`, // the application's
			Index{Name: "owner_1_expiresAt_1", Key: "{owner: 1, expiresAt: 1}", Fields: []string{"owner", "expiresAt"}, Partial: true}},
		{`{"v": 2, "key": {"owner": 1, "expiresAt": -1}, "name": "owner_1_expiresAt_1", "sparse": true}`, // the application's
			Index{Name: "owner_1_expiresAt_1", Key: "{owner: 1, expiresAt: -1}", Fields: []string{"owner", "expiresAt"}, Sparse: true}},
		{`{"name": 7}`, Index{Key: "{}"}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			if got := mustIndex(t, tc.spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseIndex = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFindExpiresAt(t *testing.T) {
	plain := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1"}`)
	desc := mustIndex(t, `{"key": {"expiresAt": -1}, "name": "e"}`)
	ttl := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "t", "expireAfterSeconds": 0}`)
	compound := mustIndex(t, `{"key": {"expiresAt": 1, "owner": 1}, "name": "c"}`)
	owner := mustIndex(t, `{"key": {"owner": 1}, "name": "owner_present"}`)
	partial := mustIndex(t, `{"key": {"expiresAt": -1}, "name": "p", "expireAfterSeconds": 0, "partialFilterExpression": {"a": 1}}`)
	hashed := mustIndex(t, `{"key": {"expiresAt": "hashed"}, "name": "h"}`)
	for _, tc := range []struct {
		name    string
		indexes []Index
		want    string // "" for none
	}{
		{"the TTL one before a partial one", []Index{ttl, partial}, "t"},
		{"a plain one before a partial one", []Index{partial, plain}, "expiresAt_1"},
		{"a partial one alone", []Index{partial, owner}, "p"},
		{"none", []Index{compound}, ""},
		{"plain", []Index{plain, owner}, "expiresAt_1"},
		{"the TTL one first", []Index{desc, ttl, plain}, "t"},
		{"the first without TTL", []Index{desc, plain}, "e"},
		{"not a hashed one", []Index{hashed}, ""},
		{"a plain one, not a hashed one", []Index{hashed, plain}, "expiresAt_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if idx := FindExpiresAt(tc.indexes); idx != nil {
				got = idx.Name
			}
			if got != tc.want {
				t.Errorf("FindExpiresAt = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServesOwners(t *testing.T) {
	plain := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1"}`)
	for _, tc := range []struct {
		name       string
		owner      string // an index spec, or ""
		want, onV1 bool   // elsewhere, and on FerretDB v1
	}{
		{"none", "", false, false},
		{"the store's", `{"key": {"owner": 1}, "name": "owner_present", "partialFilterExpression": {"owner": {"$exists": true}}}`, true, true},
		{"the store's, sparse (FerretDB v1)", `{"key": {"owner": 1}, "name": "owner_present", "sparse": true}`, true, true},
		{"the application's, unique", `{"key": {"owner": 1}, "name": "owner_1", "unique": true}`, true, true},
		{"the application's, descending", `{"key": {"owner": -1}, "name": "by_owner"}`, true, true},
		{"the application's, no options (format 1's on FerretDB v1, which leaves sparse out)", `{"key": {"owner": 1}, "name": "owner_1"}`, true, false},
		{"format 1's, dropped", `{"key": {"owner": 1}, "name": "owner_1", "sparse": true}`, false, false},
		{"partial, the application's", `{"key": {"owner": 1}, "name": "o", "partialFilterExpression": {"a": 1}}`, false, false},
		{"hashed", `{"key": {"owner": "hashed"}, "name": "owner_hashed"}`, false, false},
		{"compound", `{"key": {"owner": 1, "expiresAt": 1}, "name": "oe"}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			indexes := []Index{plain}
			if tc.owner != "" {
				indexes = append(indexes, mustIndex(t, tc.owner))
			}
			if got, onV1 := ServesOwners(indexes, false), ServesOwners(indexes, true); got != tc.want || onV1 != tc.onV1 {
				t.Fatalf("ServesOwners = %v, on FerretDB v1 %v; want %v, %v", got, onV1, tc.want, tc.onV1)
			}
		})
	}
}

func TestParseBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name, ext string
		want      BuildInfo
	}{
		{"MongoDB", `{"version": "8.0.4", "ok": 1}`, BuildInfo{MongoDB, "8.0.4", "8.0.4"}},
		{"FerretDB v1", `{"version": "7.0.42", "ferretdbVersion": "v1.24.0"}`, BuildInfo{FerretDB1, "v1.24.0", "7.0.42"}},
		{"FerretDB v2", `{"version": "7.0.77", "ferretdb": {"version": "v2.5.0"}}`, BuildInfo{FerretDB2, "v2.5.0", "7.0.77"}},
		{"refused", ``, BuildInfo{Kind: MongoDB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw bson.Raw
			if tc.ext != "" {
				if err := bson.UnmarshalExtJSON([]byte(tc.ext), false, &raw); err != nil {
					t.Fatal(err)
				}
			}
			got := ParseBuildInfo(raw)
			if got != tc.want || got.ExactIDOnly() != (tc.want.Kind == FerretDB1) {
				t.Errorf("ParseBuildInfo = %+v (exact _id only %v), want %+v", got, got.ExactIDOnly(), tc.want)
			}
		})
	}
}

// server answers the store's commands as a server would.
type server struct{ collMod, createTTL Answer }

// run follows Decide against s, as NewStore does, and returns the steps
// sent and the outcome.
func (s server) run(t *testing.T, idx *Index) ([]Step, Outcome) {
	t.Helper()
	var a Answers
	var steps []Step
	for range 10 {
		d := Decide(idx, a)
		switch d.Next {
		case None:
			return steps, d.Outcome
		case CollMod:
			a.CollMod = s.collMod
		case DropPlain:
			a.Dropped = true
		case CreateTTL:
			a.CreateTTL = s.createTTL
		case CreatePlain:
			a.Restored = true
		}
		steps = append(steps, d.Next)
	}
	t.Fatalf("Decide did not end: %v", steps)
	return nil, Pending
}

func TestDecide(t *testing.T) {
	plain := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1"}`)
	other := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "by_expiry"}`)
	hour := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 3600}`)
	ttl := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 0}`)
	partial := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "expiresAt_1", "expireAfterSeconds": 0, "partialFilterExpression": {"owner": {"$exists": true}}}`)
	mongoDB := server{collMod: Accepted, createTTL: Accepted}
	documentDB := server{collMod: Rejected, createTTL: Accepted} // as MongoDB before 5.1
	ferretDB1 := server{collMod: Refused, createTTL: Refused}
	noTTL := server{collMod: Rejected, createTTL: Refused} // collMod there, TTL indexes refused
	odd := server{collMod: Rejected, createTTL: Rejected}
	for _, tc := range []struct {
		name    string
		idx     *Index
		server  server
		steps   []Step
		outcome Outcome
	}{
		{"TTL index already", &ttl, ferretDB1, nil, TTL},
		{"partial TTL index", &partial, mongoDB, nil, Conflict},
		{"none, TTL", nil, documentDB, []Step{CreateTTL}, TTL},
		{"none, no TTL", nil, ferretDB1, []Step{CreateTTL}, NoTTL},
		{"none, another answer", nil, odd, []Step{CreateTTL}, Failed},
		{"own plain, collMod", &plain, mongoDB, []Step{CollMod}, TTL},
		{"own plain, no collMod", &plain, ferretDB1, []Step{CollMod}, NoTTL},
		{"own plain, collMod rejected", &plain, documentDB, []Step{CollMod, DropPlain, CreateTTL}, TTL},
		{"own plain, collMod rejected, no TTL", &plain, noTTL, []Step{CollMod, DropPlain, CreateTTL, CreatePlain}, NoTTL},
		{"own plain, odd", &plain, odd, []Step{CollMod, DropPlain, CreateTTL}, Failed},
		{"another plain, collMod", &other, mongoDB, []Step{CollMod}, TTL},
		{"another plain, collMod rejected", &other, documentDB, []Step{CollMod}, Conflict},
		{"TTL of an hour, collMod", &hour, documentDB.with(Accepted), []Step{CollMod}, TTL},
		{"TTL of an hour, collMod rejected", &hour, documentDB, []Step{CollMod}, Conflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, outcome := tc.server.run(t, tc.idx)
			if !reflect.DeepEqual(steps, tc.steps) || outcome != tc.outcome {
				t.Errorf("steps %v, outcome %v; want %v, %v", steps, outcome, tc.steps, tc.outcome)
			}
		})
	}
}

// with returns s answering collMod so.
func (s server) with(collMod Answer) server { s.collMod = collMod; return s }

func TestConflictReason(t *testing.T) {
	hour := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "exp", "expireAfterSeconds": 3600}`)
	plain := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "exp"}`)
	partial := mustIndex(t, `{"key": {"expiresAt": 1}, "name": "exp", "expireAfterSeconds": 0, "partialFilterExpression": {"a": 1}}`)
	for idx, want := range map[*Index]string{&hour: "has expireAfterSeconds 3600", &plain: "has no expireAfterSeconds",
		&partial: "has a partialFilterExpression"} {
		got := ConflictReason("sessions", idx)
		for _, w := range []string{`index "exp" on expiresAt`, want, `db.getCollection("sessions").dropIndex("exp")`} {
			if !strings.Contains(got, w) {
				t.Errorf("ConflictReason = %q, does not say %q", got, w)
			}
		}
	}
}
