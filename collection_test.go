package mongostore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

func TestDocumentLayout(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	_, id := saveNewSession(t, f, map[any]any{"k": "v"})
	doc := storedDocument(t, f, id)
	want := []struct {
		field string
		typ   bson.Type
	}{
		{fieldID, bson.TypeString}, {fieldVersion, bson.TypeInt32}, {fieldSID, bson.TypeString}, {fieldRev, bson.TypeInt64},
		{fieldData, bson.TypeBinary}, {fieldMAC, bson.TypeBinary},
		{fieldCreatedAt, bson.TypeDateTime}, {fieldUpdatedAt, bson.TypeDateTime}, {fieldExpiresAt, bson.TypeDateTime},
		{fieldMaxAge, bson.TypeInt64},
	}
	for _, w := range want {
		v, err := doc.LookupErr(w.field)
		if err != nil || v.Type != w.typ {
			t.Errorf("field %s: type %v, err %v; want %v", w.field, v.Type, err, w.typ)
		}
	}
	// Exactly these fields: no owner field without an owner.
	if elems, err := doc.Elements(); err != nil || len(elems) != len(want) {
		t.Errorf("the document has fields %v (%v), want %d", doc, err, len(want))
	}
	const maxAge = 24 * 60 * 60 // the default Options.MaxAge
	if got := doc.Lookup(fieldExpiresAt).Time(); !got.Equal(clock.Now().Add(maxAge * time.Second)) {
		t.Errorf("expiresAt = %v, want now + MaxAge", got)
	}
	for field, want := range map[string]int64{fieldVersion: formatVersion, fieldRev: 1, fieldMaxAge: maxAge} {
		if got, ok := doc.Lookup(field).AsInt64OK(); !ok || got != want {
			t.Errorf("%s = %v, want %d", field, doc.Lookup(field), want)
		}
	}
	for _, field := range []string{fieldCreatedAt, fieldUpdatedAt} {
		if got := doc.Lookup(field).Time(); !got.Equal(clock.Now()) {
			t.Errorf("%s = %v, want now", field, got)
		}
	}
	if _, mac := doc.Lookup(fieldMAC).Binary(); len(mac) != sha256.Size {
		t.Errorf("mac has %d bytes, want %d", len(mac), sha256.Size)
	}
}

// TestMaxAgeBeyondInt32 checks that a session whose Options.MaxAge does
// not fit 32 bits (the field once wrapped it) is either refused by Save,
// with nothing written, or loads again with its MaxAge: Save never writes a
// document that fails its own MAC.
func TestMaxAgeBeyondInt32(t *testing.T) {
	for _, maxAge := range []int{math.MaxInt32, math.MaxInt32 + 1} {
		t.Run(fmt.Sprint(maxAge), func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b := newBrowser()
			var saveErr error
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["k"] = "v"
				s.Options.MaxAge = maxAge
				saveErr = s.Save(r, w)
			})
			if saveErr != nil {
				if n := f.count(t); n != 0 {
					t.Fatalf("Save = %v, and %d documents written", saveErr, n)
				}
				return
			}
			if s, err := loadSession(t, f, b); err != nil || s.IsNew || s.Options.MaxAge != maxAge {
				t.Fatalf("saved with MaxAge %d, loaded IsNew=%v MaxAge=%d err=%v; want the session, or Save refusing it",
					maxAge, s.IsNew, s.Options.MaxAge, err)
			}
		})
	}
}

// TestRequestsQueryByIDOnly: every command of a request filters on exactly
// {_id}, but a save's where the server plans queries (TestSaveShapes).
func TestRequestsQueryByIDOnly(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	f.cmds.reset()
	// load + save, load + regenerate, load + delete. (A save near its
	// session's expiry is guarded: TestSaveNearExpiryIsGuarded.)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["k"] = "w"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	b2, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	b2.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	filters := commandFilters(t, f.cmds)
	for _, name := range []string{"find", "update", "delete"} {
		if len(filters[name]) == 0 {
			t.Errorf("no %s command recorded", name)
		}
	}
	for _, filter := range filters["update"] { // a save, conditional: TestSaveShapes
		if elems, _ := filter.Elements(); len(elems) != 2 || filter.Lookup(fieldRev).Type == 0 {
			t.Errorf("update with filter %s: want exactly {_id, rev}", filter)
		}
	}
	delete(filters, "update")
	for name, fs := range filters {
		for _, filter := range fs {
			if !isIDOnly(filter) {
				t.Errorf("%s with filter %s: want exactly {_id: ...}", name, filter)
			}
		}
	}
	if f.count(t) != 1 {
		t.Fatalf("%d documents left, want 1 (the regenerated session)", f.count(t))
	}
}

// flipByte returns s with the byte at i changed.
func flipByte(s string, i int) string {
	b := []byte(s)
	b[i] ^= 0x01
	return string(b)
}

// fuzzDocID is the _id the fuzzed documents are stored under.
var fuzzDocID = docID("fuzz-session-id")

// The valid documents fuzzDocuments returns first, in this order.
const (
	seedCompact        = iota // plain, the default codec's compact form
	seedGob                   // plain, the default codec's gob fallback
	seedJSON                  // plain, JSONCodec
	seedEmpty                 // plain, no codec bytes at all (expired)
	seedEncrypted             // encrypted with testBlockKey, compact form
	seedEncryptedOwned        // encrypted, gob fallback, with an owner
)

// fuzzDocuments returns valid session documents of format 1, sealed with
// testHashKey (and encrypted with testBlockKey), and mutations of them.
func fuzzDocuments(tb testing.TB) [][]byte {
	tb.Helper()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	later := now.Add(time.Hour)
	encode := func(c Codec, values map[any]any) []byte {
		data, err := c.Encode(values)
		if err != nil {
			tb.Fatal(err)
		}
		return data
	}
	compactData := encode(compactCodec{}, map[any]any{"user": "alice", "n": 42, "roles": []string{"admin"}})
	gobData := encode(compactCodec{}, map[any]any{"user": "alice", 42: "answer", ownerKey: "alice", deviceKey: "fuzzer"})
	jsonData := encode(JSONCodec{}, map[any]any{"user": "alice", "n": 42})
	plain, encrypting := testSealer(tb), testEncryptingSealer(tb)
	sealed := func(s *sealer, data []byte, expiresAt time.Time, owner string) []byte {
		d := document{id: fuzzDocID, format: formatVersion, rev: 1, createdAt: now, updatedAt: now, expiresAt: expiresAt, maxAge: 3600,
			data: s.wrap(fuzzDocID, data), owner: owner}
		s.seal(&d)
		return marshalDocument(tb, &d)
	}
	valid := sealed(plain, compactData, later, "")
	docs := [][]byte{
		seedCompact:        valid,
		seedGob:            sealed(plain, gobData, later, ""),
		seedJSON:           sealed(plain, jsonData, later, ""),
		seedEmpty:          sealed(plain, nil, now, ""),
		seedEncrypted:      sealed(encrypting, compactData, later, ""),
		seedEncryptedOwned: sealed(encrypting, gobData, later, encrypting.ownerDigest("alice")),
	}
	// withField returns valid with field set to value (or removed, for nil).
	withField := func(field string, value any) []byte {
		var d bson.D
		if err := bson.Unmarshal(valid, &d); err != nil {
			tb.Fatal(err)
		}
		var out bson.D
		found := false
		for _, e := range d {
			if e.Key == field {
				found = true
				if value == nil {
					continue
				}
				e.Value = value
			}
			out = append(out, e)
		}
		if !found && value != nil {
			out = append(out, bson.E{Key: field, Value: value})
		}
		return mustMarshal(tb, out)
	}
	date := bson.NewDateTimeFromTime
	docs = append(docs,
		valid[:len(valid)/2],
		valid[:len(valid)-1],
		[]byte(flipByte(string(valid), 30)),
		[]byte(flipByte(string(valid), len(valid)-20)),
		withField(fieldVersion, nil),                           // no version: an unreleased format
		withField(fieldVersion, int32(3)),                      // another version
		withField(fieldRev, int32(1)),                          // rev of another integer type
		withField(fieldMaxAge, "3600"),                         // maxAge not a number
		withField(fieldOwner, "somebody"),                      // an owner field the MAC does not cover
		withField(fieldExpiresAt, date(now.Add(24*time.Hour))), // expiry pushed out
		marshalDocument(tb, &document{id: fuzzDocID, rev: 1, createdAt: now, updatedAt: now, expiresAt: now,
			data: []byte{0x0d, 0x7f, 0x04}, mac: []byte("forged mac")}),
		mustMarshal(tb, bson.D{}),
		mustMarshal(tb, bson.D{{Key: fieldData, Value: "not binary"}}),
		mustMarshal(tb, bson.D{
			{Key: fieldID, Value: fuzzDocID},
			{Key: fieldVersion, Value: int32(formatVersion)},
			{Key: fieldRev, Value: int64(1)},
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryUserDefined, Data: compactData}},
			{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: make([]byte, 32)}},
			{Key: fieldCreatedAt, Value: date(now)},
			{Key: fieldUpdatedAt, Value: date(now)},
			{Key: fieldExpiresAt, Value: date(now)},
			{Key: fieldMaxAge, Value: int32(0)},
		}),
		mustMarshal(tb, bson.D{
			{Key: fieldID, Value: fuzzDocID},
			{Key: fieldVersion, Value: int32(formatVersion)},
			{Key: fieldRev, Value: int64(1)},
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: compactData}},
			{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: make([]byte, 32)}},
			{Key: fieldCreatedAt, Value: now.Format(time.RFC3339)},
			{Key: fieldUpdatedAt, Value: date(now)},
			{Key: fieldExpiresAt, Value: date(now)},
			{Key: fieldMaxAge, Value: int32(0)},
		}),
		mustMarshal(tb, bson.D{
			{Key: fieldID, Value: fuzzDocID},
			{Key: fieldVersion, Value: int64(formatVersion)},
			{Key: fieldRev, Value: int64(-1 << 63)},
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte{0xff, 0xff, 0xff, 0x7f, 0x00}}},
			{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric}},
			{Key: fieldCreatedAt, Value: bson.DateTime(-1 << 63)},
			{Key: fieldUpdatedAt, Value: bson.DateTime(1<<63 - 1)},
			{Key: fieldExpiresAt, Value: bson.DateTime(0)},
			{Key: fieldMaxAge, Value: int32(-1 << 31)},
		}),
		nil,
		[]byte{5, 0, 0, 0, 0},
		[]byte{0xff, 0xff, 0xff, 0xff},
	)
	return docs
}

// FuzzDecodeDocument checks the path from a stored document to session
// values (parseDocument, the MAC, the envelope, the codec), for a store
// that only signs and one that encrypts: no bytes make it panic, a
// document it accepts has every field, data reaches the codec only with a
// valid MAC (the gob decoder is not hardened against hostile input), and a
// store that encrypts accepts only encrypted data.
func FuzzDecodeDocument(f *testing.F) {
	for _, doc := range fuzzDocuments(f) {
		f.Add(doc)
	}
	// A field twice: the first is the document's, as Lookup reads it.
	twice := bsoncore.NewDocumentBuilder().AppendInt64(fieldRev, 1).AppendString(fieldID, "a").AppendInt64(fieldRev, 2).Build()
	f.Add([]byte(twice))
	if _, err := os.Stat(format2Fixture); err == nil { // absent only while TestWriteFixture writes it anew
		for _, doc := range append(readFormat1Fixture(f, format1Fixture), readFormat1Fixture(f, format2Fixture)...) {
			f.Add([]byte(doc.raw))
		}
	}
	stores := []*Store{
		{cfg: Config{Codec: &spyCodec{}}, sealer: testSealer(f)},
		{cfg: Config{Codec: &spyCodec{}}, sealer: testEncryptingSealer(f)},
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if r := bson.Raw(raw); r.Validate() == nil { // fieldsOf finds what Lookup finds
			got := fieldsOf(r)
			for name, v := range map[string]bson.RawValue{fieldVersion: got.version, fieldID: got.id, fieldSID: got.sid, fieldRev: got.rev,
				fieldData: got.data, fieldMAC: got.mac, fieldCreatedAt: got.createdAt, fieldUpdatedAt: got.updatedAt,
				fieldExpiresAt: got.expiresAt, fieldMaxAge: got.maxAge, fieldOwner: got.owner, fieldLineage: got.lineage} {
				if want := r.Lookup(name); v.Type != want.Type || !bytes.Equal(v.Value, want.Value) {
					t.Fatalf("fieldsOf: %s = %v, Lookup: %v", name, v, want)
				}
			}
		}
		for _, store := range stores {
			spy := store.cfg.Codec.(*spyCodec)
			spy.decoded = nil
			doc, encoded, values, err := store.open(raw)
			if err != nil {
				if !errors.Is(err, ErrDecode) {
					t.Fatalf("error %v does not wrap ErrDecode", err)
				}
				if spy.decoded != nil && !store.sealer.verify(&doc) {
					t.Fatalf("data of a document with a bad MAC reached the codec: %x", spy.decoded)
				}
				if spy.decoded != nil && store.sealer.encrypt && doc.data[0] != envelopeGCM {
					t.Fatalf("plain data reached the codec of a store that encrypts: %x", spy.decoded)
				}
				continue
			}
			if values == nil || !store.sealer.verify(&doc) {
				t.Fatal("accepted a document without a valid MAC")
			}
			if store.sealer.encrypt && doc.data[0] != envelopeGCM {
				t.Fatal("a store that encrypts accepted plain data")
			}
			if !bytes.Equal(encoded, spy.decoded) {
				t.Fatalf("encoded values %x, the codec decoded %x", encoded, spy.decoded)
			}
			// Success means every field is there with its type.
			r := bson.Raw(raw)
			for field, got := range map[string]time.Time{fieldCreatedAt: doc.createdAt, fieldUpdatedAt: doc.updatedAt, fieldExpiresAt: doc.expiresAt} {
				if want := r.Lookup(field).DateTime(); got.UnixMilli() != want {
					t.Fatalf("%s = %v (%d ms), document holds %d", field, got, got.UnixMilli(), want)
				}
			}
			if _, bin := r.Lookup(fieldData).Binary(); !bytes.Equal(bin, doc.data) {
				t.Fatalf("data %x, document holds %x", doc.data, bin)
			}
			if id := r.Lookup(fieldID).StringValue(); id != doc.id {
				t.Fatalf("_id %q, document holds %q", doc.id, id)
			}
			for field, got := range map[string]int64{fieldVersion: doc.format, fieldRev: doc.rev, fieldMaxAge: int64(doc.maxAge)} {
				if want, ok := r.Lookup(field).AsInt64OK(); !ok || got != want {
					t.Fatalf("%s = %d, document holds %v", field, got, r.Lookup(field))
				}
			}
		}
	})
}

// spyCodec is the default codec, recording what it was asked to decode.
type spyCodec struct {
	compactCodec
	decoded []byte
}

func (c *spyCodec) Decode(data []byte) (map[any]any, error) {
	c.decoded = append([]byte{}, data...)
	return c.compactCodec.Decode(data)
}

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// marshalDocument returns the document d as the store inserts it.
func marshalDocument(tb testing.TB, d *document) []byte {
	tb.Helper()
	return d.raw()
}

// testSealer returns the document sealer of a store keyed with testHashKey.
func testSealer(tb testing.TB) *sealer {
	tb.Helper()
	s := newSealer([]keyPair{{hash: testHashKey}})
	return s
}

// testEncryptingSealer returns the document sealer of a store keyed with
// testHashKey and testBlockKey.
func testEncryptingSealer(tb testing.TB) *sealer {
	tb.Helper()
	s := newSealer([]keyPair{{hash: testHashKey, block: testBlockKey}})
	return s
}

func TestDatabaseErrorsAreWrapped(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	client := f.coll.Database().Client()
	if err := client.Disconnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := loadSession(t, f, b)
	if !errors.Is(err, ErrDatabase) || s == nil || !s.IsNew {
		t.Fatalf("Get on a disconnected client = %v (session %v); want ErrDatabase and a new session", err, s)
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.New(r, "fresh")
		s.Values["k"] = "v"
		if err := s.Save(r, w); !errors.Is(err, ErrDatabase) {
			t.Fatalf("Save on a disconnected client = %v, want ErrDatabase", err)
		}
	})
}

// TestFuzzDocumentSeedsDecode checks that the valid seeds of
// FuzzDecodeDocument do decode, plain ones in a store that only signs and
// encrypted ones in a store that encrypts, so the fuzzer starts from
// documents that pass every check.
func TestFuzzDocumentSeedsDecode(t *testing.T) {
	plain := &Store{cfg: Config{Codec: compactCodec{}}, sealer: testSealer(t)}
	plainJSON := &Store{cfg: Config{Codec: JSONCodec{}}, sealer: testSealer(t)}
	encrypting := &Store{cfg: Config{Codec: compactCodec{}}, sealer: testEncryptingSealer(t)}
	docs := fuzzDocuments(t)
	for _, tt := range []struct {
		name  string
		store *Store
		seed  int
	}{
		{"compact", plain, seedCompact},
		{"gob fallback", plain, seedGob},
		{"json", plainJSON, seedJSON},
		{"encrypted", encrypting, seedEncrypted},
		{"encrypted with an owner", encrypting, seedEncryptedOwned},
	} {
		if _, _, values, err := tt.store.open(docs[tt.seed]); err != nil || values["user"] != "alice" {
			t.Fatalf("seed %s: %v, %v", tt.name, values, err)
		}
	}
	// A store that encrypts refuses the plain seeds.
	if _, _, values, err := encrypting.open(docs[seedCompact]); !errors.Is(err, ErrDecode) {
		t.Fatalf("a store that encrypts opened a plain document: %v, %v", values, err)
	}
}
