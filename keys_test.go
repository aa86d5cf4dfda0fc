package mongostore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
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

// readOldDocuments reads a file of testdata/ holding documents written by
// an earlier release's code with the hash key testHashKey, each line a
// session ID and the document in hex:
//
//   - v1-documents.txt: commit 9d7bfcd (format version 1: no "v" field, the
//     MAC key an HMAC of the hash key over a label, updatedAt not covered);
//   - v2-documents.txt: commit 200de63 (format version 2: HKDF MAC key,
//     updatedAt and the version covered, data the codec's bytes);
//   - v3-documents.txt: commit 34e59f1 (format version 3: data an envelope
//     around CompactCodec's bytes, the default then; no owner fields).
func readOldDocuments(t *testing.T, file string) []oldDocument {
	t.Helper()
	f, err := os.Open("testdata/" + file)
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
	if len(docs) != 2 || docs[0].sessionID == docs[1].sessionID {
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

func TestOldDocumentsKeepLoading(t *testing.T) {
	for _, fixture := range []struct {
		file    string
		version int64 // 1: no version field
		created time.Time
	}{
		{"v1-documents.txt", 1, time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)},
		{"v2-documents.txt", 2, time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)},
		{"v3-documents.txt", 3, time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)},
	} {
		old := readOldDocuments(t, fixture.file)
		for i, tt := range []struct {
			codec Codec // nil: the default, which reads old documents with gob
			want  map[any]any
		}{
			{nil, map[any]any{"user": "ada", "n": 42}},
			{JSONCodec{}, map[any]any{"user": "grace", "n": float64(7)}},
		} {
			t.Run(fixture.file+"/"+old[i].sessionID, func(t *testing.T) {
				testOldDocument(t, old[i], fixture.version, fixture.created, tt.codec, tt.want)
			})
		}
	}
}

// testOldDocument checks that doc, written by an earlier release in format
// version version, loads with want, and is rewritten in the current version
// at its next save.
func testOldDocument(t *testing.T, doc oldDocument, version int64, created time.Time, codec Codec, want map[any]any) {
	got, err := doc.raw.LookupErr(fieldVersion)
	if v, _ := got.AsInt64OK(); (version == 1) != (err != nil) || (version > 1 && v != version) {
		t.Fatalf("the fixture's version field is %v, want version %d", got, version)
	}
	f := newFixture(t, Config{Expiry: ExpiryNone, Codec: codec})
	if _, err := f.coll.InsertOne(context.Background(), doc.raw); err != nil {
		t.Fatal(err)
	}
	b := cookieFor(t, f.store, doc.sessionID)
	s, err := load(t, f, b)
	if err != nil || s.IsNew {
		t.Fatalf("version 1 document: IsNew=%v err=%v", s.IsNew, err)
	}
	for k, v := range want {
		if s.Values[k] != v {
			t.Fatalf("values %v, want %v", s.Values, want)
		}
	}
	times, _ := f.store.Times(s)
	if !times.CreatedAt.Equal(created) {
		t.Fatalf("createdAt %v, want %v", times.CreatedAt, created)
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
	if s, err := load(t, f, b); err != nil || s.Values["again"] != "yes" || s.Values["user"] != want["user"] {
		t.Fatalf("rewritten document: %v, %v", s.Values, err)
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
	s, err := newDataSealer([]keyPair{{hash: testHashKey}, {hash: otherHashKey}})
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

func TestDatabaseNeverHoldsRawSessionID(t *testing.T) {
	for _, tt := range []struct {
		name string
		key  []byte
	}{{"sha256", nil}, {"hmac", bytes.Repeat([]byte{0x44}, 32)}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{IDHashKey: tt.key})
			_, id := saveNew(t, f, map[any]any{"k": "v"})
			raw, _ := idEncoding.DecodeString(id)

			var want string
			if tt.key == nil {
				sum := sha256.Sum256([]byte(id))
				want = hex.EncodeToString(sum[:])
			} else {
				m := hmac.New(sha256.New, tt.key)
				m.Write([]byte(id))
				want = hex.EncodeToString(m.Sum(nil))
			}
			cur, err := f.coll.Find(context.Background(), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			var docs []bson.Raw
			if err := cur.All(context.Background(), &docs); err != nil || len(docs) != 1 {
				t.Fatalf("documents: %d, %v", len(docs), err)
			}
			if got := docs[0].Lookup(fieldID).StringValue(); got != want {
				t.Fatalf("_id = %s, want %s", got, want)
			}
			if bytes.Contains(docs[0], []byte(id)) || bytes.Contains(docs[0], raw) || strings.Contains(docs[0].String(), id) {
				t.Fatal("the document contains the raw session ID")
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	newStore := func(keys ...[]byte) *storeFixture {
		s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, keys...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &storeFixture{store: s, coll: coll, cmds: &commandLog{}}
	}
	oldKeys := newStore(otherHashKey, testBlockKey)
	rotated := newStore(testHashKey, nil, otherHashKey, testBlockKey)
	onlyNew := newStore(testHashKey)

	b, _ := saveNew(t, oldKeys, map[any]any{"user": "ada"})
	if s, err := load(t, rotated, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
		t.Fatalf("rotated store cannot read an old-key cookie: IsNew=%v err=%v", s.IsNew, err)
	}
	// A save re-issues the cookie with the first (new) key pair.
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := rotated.store.Get(r, testSessionName)
		s.Values["n"] = 1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	if s, err := load(t, onlyNew, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
		t.Fatalf("re-issued cookie not signed with the new key: IsNew=%v err=%v", s.IsNew, err)
	}
	if s, err := load(t, oldKeys, b); !s.IsNew || !errors.Is(err, ErrInvalidCookie) {
		t.Fatalf("old-key store read a new-key cookie: IsNew=%v err=%v", s.IsNew, err)
	}
}

func TestForeignDataNeverReachesTheCodec(t *testing.T) {
	spy := &spyCodec{}
	f := newFixture(t, Config{Codec: spy})
	b, id := saveNew(t, f, map[any]any{"user": "ada"})
	docID := f.store.hasher.docID(id)

	// Someone with write access to the collection, but not the app's keys,
	// replaces the data (a crafted gob stream can exhaust memory).
	hostile := []byte("\r\x7f\x04\x01\x02\xff0\x00\x01\x10\x01\x10\x00\x007\xff\x80")
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldData, Value: bson.Binary{Data: hostile}}}}}); err != nil {
		t.Fatal(err)
	}
	spy.decoded = nil
	s, err := load(t, f, b)
	if !errors.Is(err, ErrDecode) || !s.IsNew {
		t.Fatalf("Get = IsNew %v, %v; want a fresh session and ErrDecode", s.IsNew, err)
	}
	if spy.decoded != nil {
		t.Fatalf("the codec was given unauthenticated data %q", spy.decoded)
	}

	// Data moved from another session's document fails too: the MAC binds
	// the data to its _id.
	_, other := saveNew(t, f, map[any]any{"user": "eve"})
	otherDoc := readDocument(t, f, other)
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: fieldData, Value: otherDoc.Lookup(fieldData)},
			{Key: fieldMAC, Value: otherDoc.Lookup(fieldMAC)},
		}}}); err != nil {
		t.Fatal(err)
	}
	if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || s.Values["user"] == "eve" {
		t.Fatalf("swapped data accepted: %v, %v", s.Values, err)
	}

	// A store whose keys rotated still reads documents sealed with the old key.
	rotated, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone, Codec: spy}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := saveNew(t, f, map[any]any{"user": "ada"})
	rf := &storeFixture{store: rotated, coll: f.coll, cmds: f.cmds}
	if s, err := load(t, rf, b2); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("rotated store: %v, %v", s.Values, err)
	}
}

// rawDocument returns the stored document of session ID id.
func rawDocument(t *testing.T, f *storeFixture, id string) bson.Raw {
	t.Helper()
	var doc bson.Raw
	if err := f.coll.FindOne(context.Background(), idFilter(f.store.hasher.docID(id))).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestEncryptionAtRest(t *testing.T) {
	const secret = "card-4111-1111-1111-1111"
	t.Run("a dump shows no values", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNew(t, f, map[any]any{"card": secret, "user": "ada-lovelace"})
		doc := rawDocument(t, f, id)
		for _, plain := range []string{secret, "ada-lovelace", "card"} {
			if bytes.Contains(doc, []byte(plain)) {
				t.Fatalf("the stored document holds %q in clear", plain)
			}
		}
		if _, data := doc.Lookup(fieldData).Binary(); data[0] != envelopeGCM {
			t.Fatalf("data envelope %#x, want AES-GCM", data[0])
		}
		if s, err := load(t, f, b); err != nil || s.Values["card"] != secret {
			t.Fatalf("reload: %v, %v", s.Values, err)
		}
	})
	t.Run("without a block key the values are only authenticated", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey)
		_, id := saveNew(t, f, map[any]any{"card": secret})
		if !bytes.Contains(rawDocument(t, f, id), []byte(secret)) {
			t.Fatal("the value is not in clear without a block key: is it encrypted with something else?")
		}
	})
	t.Run("tampered ciphertext, even with a valid MAC", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNew(t, f, map[any]any{"card": secret})
		docID := f.store.hasher.docID(id)
		stored, err := decodeDocument(docID, rawDocument(t, f, id))
		if err != nil {
			t.Fatal(err)
		}
		fields := stored.sealedFields
		fields.data = bytes.Clone(fields.data)
		fields.data[len(fields.data)-1] ^= 1
		resealed(t, f, fields)
		if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
			t.Fatalf("IsNew=%v err=%v; want ErrDecode", s.IsNew, err)
		}
	})
	t.Run("ciphertext moved to another document", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		_, victim := saveNew(t, f, map[any]any{"user": "admin"})
		b, attacker := saveNew(t, f, map[any]any{"user": "mallory"})
		from, err := decodeDocument(f.store.hasher.docID(victim), rawDocument(t, f, victim))
		if err != nil {
			t.Fatal(err)
		}
		to := from.sealedFields
		to.docID = f.store.hasher.docID(attacker) // the MAC is recomputed: only the AEAD's binding to _id stops it
		resealed(t, f, to)
		if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || s.Values["user"] == "admin" {
			t.Fatalf("values %v err=%v; want ErrDecode", s.Values, err)
		}
	})
	t.Run("key rotation", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNew(t, f, map[any]any{"card": secret})
		newBlock := bytes.Repeat([]byte{0x44}, 32)
		rotated, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone}, otherHashKey, newBlock, testHashKey, testBlockKey)
		if err != nil {
			t.Fatal(err)
		}
		// The rotated store reads the old document, and rewrites it with the new keys.
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := rotated.Get(r, testSessionName)
			if err != nil || s.Values["card"] != secret {
				t.Fatalf("rotated store: %v, %v", s.Values, err)
			}
			s.Values["n"] = 1
			if err := s.Save(r, w); err != nil {
				t.Fatal(err)
			}
		})
		// Only the new keys are needed now.
		only, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone}, otherHashKey, newBlock)
		if err != nil {
			t.Fatal(err)
		}
		of := &storeFixture{store: only, coll: f.coll, cmds: f.cmds}
		if s, err := load(t, of, b); err != nil || s.Values["n"] != 1 {
			t.Fatalf("new keys only: %v, %v", s.Values, err)
		}
		// And a store that lost the block key cannot read it (given a cookie
		// it can read: the cookie was encrypted with the block key too).
		noBlock, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone}, otherHashKey)
		if err != nil {
			t.Fatal(err)
		}
		nf := &storeFixture{store: noBlock, coll: f.coll, cmds: f.cmds}
		if _, err := load(t, nf, cookieFor(t, noBlock, id)); !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), "no block key") {
			t.Fatalf("without the block key: %v, want ErrDecode saying so", err)
		}
	})
}

// resealed stores fields as the document fields.docID, with a valid MAC:
// what someone holding the hash key (but not the block key) could write.
func resealed(t *testing.T, f *storeFixture, fields sealedFields) {
	t.Helper()
	mac := f.store.sealer.seal(&fields)
	if _, err := f.coll.ReplaceOne(context.Background(), idFilter(fields.docID), newDocument(fields, mac, "")); err != nil {
		t.Fatal(err)
	}
}
