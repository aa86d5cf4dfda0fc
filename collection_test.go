package mongostore

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// readDocument returns the stored document of session ID id.
func readDocument(t *testing.T, f *storeFixture, id string) bson.Raw {
	t.Helper()
	raw, err := f.coll.FindOne(context.Background(), bson.D{{Key: fieldID, Value: f.store.hasher.docID(id)}}).Raw()
	if err != nil {
		t.Fatalf("read document: %v", err)
	}
	return raw
}

func TestDocumentLayout(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	_, id := saveNew(t, f, map[any]any{"k": "v"})
	doc := readDocument(t, f, id)
	for field, typ := range map[string]bson.Type{
		fieldID: bson.TypeString, fieldData: bson.TypeBinary,
		fieldCreatedAt: bson.TypeDateTime, fieldUpdatedAt: bson.TypeDateTime, fieldExpiresAt: bson.TypeDateTime,
	} {
		v, err := doc.LookupErr(field)
		if err != nil || v.Type != typ {
			t.Errorf("field %s: type %v, err %v; want %v", field, v.Type, err, typ)
		}
	}
	if got := doc.Lookup(fieldExpiresAt).Time(); !got.Equal(clock.Now().Add(DefaultMaxAge * time.Second)) {
		t.Errorf("expiresAt = %v, want now + MaxAge", got)
	}
}

// commandFilters returns the filters of the recorded commands that read or
// write documents, by command name.
func commandFilters(t *testing.T, cmds *commandLog) map[string][]bson.Raw {
	t.Helper()
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	out := make(map[string][]bson.Raw)
	for _, c := range cmds.commands {
		elems, err := c.Elements()
		if err != nil || len(elems) == 0 {
			t.Fatal(err)
		}
		name := elems[0].Key()
		switch name {
		case "find", "findAndModify":
			key := "filter"
			if name == "findAndModify" {
				key = "query"
			}
			out[name] = append(out[name], c.Lookup(key).Document())
		case "update", "delete":
			key := map[string]string{"update": "updates", "delete": "deletes"}[name]
			stmts, _ := c.Lookup(key).Array().Values()
			for _, st := range stmts {
				out[name] = append(out[name], st.Document().Lookup("q").Document())
			}
		}
	}
	return out
}

// isIDOnly reports whether filter is exactly {_id: <string>}, the one shape
// every server answers from its _id index (FerretDB v1 scans the collection
// for any other).
func isIDOnly(filter bson.Raw) bool {
	elems, err := filter.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != fieldID {
		return false
	}
	_, ok := elems[0].Value().StringValueOK()
	return ok
}

func TestRequestsQueryByIDOnly(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
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
	b2, _ := saveNew(t, f, map[any]any{"k": "v"})
	b2.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	filters := commandFilters(t, f.cmds)
	for _, name := range []string{"find", "findAndModify", "delete"} {
		if len(filters[name]) == 0 {
			t.Errorf("no %s command recorded", name)
		}
	}
	for name, fs := range filters {
		for _, filter := range fs {
			if !isIDOnly(filter) {
				t.Errorf("%s with filter %s: want exactly {_id: ...}", name, filter)
			}
		}
	}
	if len(filters["update"]) != 0 {
		t.Errorf("%d update commands, want none (saves are findAndModify)", len(filters["update"]))
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
var fuzzDocID = idHasher{}.docID("fuzz-session-id")

// fuzzDocuments returns valid session documents and mutations of them.
func fuzzDocuments(tb testing.TB) [][]byte {
	tb.Helper()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	gobData, err := GobCodec{}.Encode(map[any]any{"user": "alice", "n": 42, "roles": []string{"admin"}})
	if err != nil {
		tb.Fatal(err)
	}
	jsonData, err := JSONCodec{}.Encode(map[any]any{"user": "alice", "n": 42})
	if err != nil {
		tb.Fatal(err)
	}
	marshal := func(v any) []byte {
		b, err := bson.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	sealer := testSealer(tb)
	sealed := func(data []byte, expiresAt time.Time) []byte {
		f := sealedFields{docID: fuzzDocID, createdAt: now, updatedAt: now, expiresAt: expiresAt, data: sealer.wrap(fuzzDocID, data)}
		mac := sealer.seal(&f)
		return marshal(newDocument(f, mac, ""))
	}
	later := now.Add(time.Hour)
	valid := sealed(gobData, later)
	// The same values encrypted, as with a block key.
	encrypted := func() []byte {
		enc, err := newDataSealer([]keyPair{{hash: testHashKey, block: testBlockKey}})
		if err != nil {
			tb.Fatal(err)
		}
		f := sealedFields{docID: fuzzDocID, createdAt: now, updatedAt: now, expiresAt: later, data: enc.wrap(fuzzDocID, gobData)}
		mac := enc.seal(&f)
		return marshal(newDocument(f, mac, ""))
	}()
	withJSON := sealed(jsonData, later)
	empty := sealed(nil, now)
	var docs [][]byte
	docs = append(docs, valid, withJSON, empty, encrypted)
	docs = append(docs,
		valid[:len(valid)/2],
		valid[:len(valid)-1],
		[]byte(flipByte(string(valid), 30)),
		[]byte(flipByte(string(valid), len(valid)-20)),
		marshal(bson.D{}),
		marshal(bson.D{{Key: fieldData, Value: "not binary"}}),
		marshal(bson.D{
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryUserDefined, Data: gobData}},
			{Key: fieldCreatedAt, Value: bsonDate(now)},
			{Key: fieldUpdatedAt, Value: bsonDate(now)},
			{Key: fieldExpiresAt, Value: bsonDate(now)},
		}),
		marshal(bson.D{
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: gobData}},
			{Key: fieldCreatedAt, Value: now.Format(time.RFC3339)},
			{Key: fieldUpdatedAt, Value: bsonDate(now)},
			{Key: fieldExpiresAt, Value: bsonDate(now)},
		}),
		marshal(bson.D{
			{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte{0xff, 0xff, 0xff, 0x7f, 0x00}}},
			{Key: fieldCreatedAt, Value: bson.DateTime(-1 << 63)},
			{Key: fieldUpdatedAt, Value: bson.DateTime(1<<63 - 1)},
			{Key: fieldExpiresAt, Value: bson.DateTime(0)},
		}),
		nil,
		[]byte{5, 0, 0, 0, 0},
		[]byte{0xff, 0xff, 0xff, 0xff},
	)
	return docs
}

// FuzzDecodeDocument checks the path from a stored document to session
// values: no bytes make it panic, a document it accepts has every field, and
// data reaches the codec only with a valid MAC (the gob decoder is not
// hardened against hostile input).
func FuzzDecodeDocument(f *testing.F) {
	for _, doc := range fuzzDocuments(f) {
		f.Add(doc)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Add(mustMarshal(f, newDocument(sealedFields{docID: fuzzDocID, version: documentVersion, createdAt: now, updatedAt: now, expiresAt: now,
		data: []byte{0x0d, 0x7f, 0x04}}, []byte("forged mac"), "")))
	spy := &spyCodec{}
	sealer, err := newDataSealer([]keyPair{{hash: testHashKey, block: testBlockKey}})
	if err != nil {
		f.Fatal(err)
	}
	store := &Store{cfg: Config{Codec: spy}, sealer: sealer}
	f.Fuzz(func(t *testing.T, raw []byte) {
		spy.decoded = nil
		doc, _, values, err := store.decodeStored(fuzzDocID, raw)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			if spy.decoded != nil && !store.sealer.verify(doc.sealedFields, doc.mac) {
				t.Fatalf("data of a document with a bad MAC reached the codec: %x", spy.decoded)
			}
			return
		}
		if values == nil || !store.sealer.verify(doc.sealedFields, doc.mac) {
			t.Fatal("accepted a document without a valid MAC")
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
	})
}

// spyCodec is GobCodec that records what it was asked to decode.
type spyCodec struct {
	GobCodec
	decoded []byte
}

func (c *spyCodec) Decode(data []byte) (map[any]any, error) {
	c.decoded = append([]byte{}, data...)
	return c.GobCodec.Decode(data)
}

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// testSealer returns the document sealer of a store keyed with testHashKey.
func testSealer(tb testing.TB) *dataSealer {
	tb.Helper()
	s, err := newDataSealer([]keyPair{{hash: testHashKey}})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestDatabaseErrorsAreWrapped(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	client := f.coll.Database().Client()
	if err := client.Disconnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := load(t, f, b)
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
// FuzzDecodeDocument, plain and encrypted, do decode, so the fuzzer starts
// from documents that pass every check.
func TestFuzzDocumentSeedsDecode(t *testing.T) {
	sealer, err := newDataSealer([]keyPair{{hash: testHashKey, block: testBlockKey}})
	if err != nil {
		t.Fatal(err)
	}
	store := &Store{cfg: Config{Codec: GobCodec{}}, sealer: sealer}
	docs := fuzzDocuments(t)
	for _, i := range []int{0, 3} { // valid, encrypted
		if _, _, values, err := store.decodeStored(fuzzDocID, docs[i]); err != nil || values["user"] != "alice" {
			t.Fatalf("seed %d: %v, %v", i, values, err)
		}
	}
}
