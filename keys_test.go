package mongostore

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// oldDocument is a session document as an earlier release wrote it.
type oldDocument struct {
	sessionID string
	raw       bson.Raw
}

// readOldDocuments reads testdata/v1-documents.txt: documents written by
// the code of commit 9d7bfcd (format version 1: no "v" field, the MAC key
// an HMAC of the hash key over a label, updatedAt not covered), with the
// hash key testHashKey, each line a session ID and the document in hex.
func readOldDocuments(t *testing.T) []oldDocument {
	t.Helper()
	f, err := os.Open("testdata/v1-documents.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []oldDocument
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		id, hexDoc, ok := strings.Cut(sc.Text(), " ")
		raw, err := hex.DecodeString(hexDoc)
		if !ok || err != nil {
			t.Fatalf("bad fixture line %q", sc.Text())
		}
		docs = append(docs, oldDocument{id, raw})
	}
	if len(docs) != 2 {
		t.Fatalf("%d fixture documents, want 2", len(docs))
	}
	return docs
}

// cookieFor returns a browser holding a valid cookie for session ID id.
func cookieFor(t *testing.T, s *Store, id string) *browser {
	t.Helper()
	v, err := securecookie.EncodeMulti(testSessionName, []byte(id), s.codecs...)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser()
	b.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: v}
	return b
}

func TestVersion1DocumentsKeepLoading(t *testing.T) {
	old := readOldDocuments(t)
	for i, tt := range []struct {
		codec Codec
		want  map[any]any
	}{
		{GobCodec{}, map[any]any{"user": "ada", "n": 42}},
		{JSONCodec{}, map[any]any{"user": "grace", "n": float64(7)}},
	} {
		doc := old[i]
		t.Run(doc.sessionID, func(t *testing.T) {
			if _, err := doc.raw.LookupErr(fieldVersion); err == nil {
				t.Fatal("the fixture has a version field: not a version 1 document")
			}
			f := newFixture(t, Config{Expiry: ExpiryNone, Codec: tt.codec})
			if _, err := f.coll.InsertOne(context.Background(), doc.raw); err != nil {
				t.Fatal(err)
			}
			b := cookieFor(t, f.store, doc.sessionID)
			s, err := load(t, f, b)
			if err != nil || s.IsNew {
				t.Fatalf("version 1 document: IsNew=%v err=%v", s.IsNew, err)
			}
			for k, v := range tt.want {
				if s.Values[k] != v {
					t.Fatalf("values %v, want %v", s.Values, tt.want)
				}
			}
			times, _ := f.store.Times(s)
			if want := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC); !times.CreatedAt.Equal(want) {
				t.Fatalf("createdAt %v, want %v", times.CreatedAt, want)
			}
			// Its next save rewrites it as the current version, which loads too.
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["again"] = "yes"
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
			var stored bson.Raw
			if err := f.coll.FindOne(context.Background(), bson.D{}).Decode(&stored); err != nil {
				t.Fatal(err)
			}
			if v, _ := stored.Lookup(fieldVersion).AsInt64OK(); v != documentVersion {
				t.Fatalf("saved document has version %v, want %d", stored.Lookup(fieldVersion), documentVersion)
			}
			if s, err := load(t, f, b); err != nil || s.Values["again"] != "yes" || s.Values["user"] != tt.want["user"] {
				t.Fatalf("rewritten document: %v, %v", s.Values, err)
			}
		})
	}
}

// TestDocumentMACCoversTrustedFields checks that changing a field the store
// trusts in the database makes the document unreadable: it is a lost
// session, not a longer-lived one or one that is never touched again.
func TestDocumentMACCoversTrustedFields(t *testing.T) {
	later := bsonDate(time.Now().Add(365 * 24 * time.Hour))
	for _, tt := range []struct {
		name   string
		change bson.D
	}{
		{"expiresAt pushed out", bson.D{{Key: "$set", Value: bson.D{{Key: fieldExpiresAt, Value: later}}}}},
		{"createdAt moved", bson.D{{Key: "$set", Value: bson.D{{Key: fieldCreatedAt, Value: later}}}}},
		{"updatedAt moved (touches suppressed)", bson.D{{Key: "$set", Value: bson.D{{Key: fieldUpdatedAt, Value: later}}}}},
		{"data replaced", bson.D{{Key: "$set", Value: bson.D{{Key: fieldData, Value: binData([]byte("x"))}}}}},
		{"version removed (downgrade to v1)", bson.D{{Key: "$unset", Value: bson.D{{Key: fieldVersion, Value: ""}}}}},
		{"unknown version", bson.D{{Key: "$set", Value: bson.D{{Key: fieldVersion, Value: int32(99)}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, id := saveNew(t, f, map[any]any{"k": "v"})
			if _, err := f.coll.UpdateOne(context.Background(), idFilter(f.store.hasher.docID(id)), tt.change); err != nil {
				t.Fatal(err)
			}
			if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
				t.Fatalf("IsNew=%v err=%v; want a fresh session and ErrDecode", s.IsNew, err)
			}
		})
	}
}

// TestMACKeysAreDerivedPerVersion checks the key derivation: HKDF for the
// current version, distinct from the version 1 key, one per hash key.
func TestMACKeysAreDerivedPerVersion(t *testing.T) {
	s, err := newDataSealer([][]byte{testHashKey, otherHashKey})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.keys) != 2 || len(s.keysV1) != 2 {
		t.Fatalf("%d keys, %d version 1 keys; want 2 each", len(s.keys), len(s.keysV1))
	}
	seen := map[string]bool{string(testHashKey): true, string(otherHashKey): true}
	for _, k := range append(s.keys, s.keysV1...) {
		if len(k) != 32 || seen[string(k)] {
			t.Fatalf("key %x is not a fresh 32-byte key", k)
		}
		seen[string(k)] = true
	}
	f := sealedFields{docID: "id", data: []byte("x")}
	mac := s.seal(&f)
	if f.version != documentVersion || !s.verify(f, mac) {
		t.Fatal("a sealed document does not verify")
	}
	f.version = 1
	if s.verify(f, mac) {
		t.Fatal("a version 2 MAC verifies as version 1")
	}
}
