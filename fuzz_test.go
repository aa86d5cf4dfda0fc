package mongostore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The fuzz targets need no database: FuzzDecodeCookie uses a store whose
// client never reaches a server, and the others test pure functions. Each
// runs on its seed corpus as an ordinary test.

// FuzzDecodeCookie checks that any cookie value is either a valid session ID
// or rejected, without a panic, and that a rejected cookie gives New a fresh
// session without a database query.
func FuzzDecodeCookie(f *testing.F) {
	// Two codecs: one signing and encrypting, one only signing.
	store, storeCmds := mwUnreachableStore(f, Config{Logger: slog.New(slog.DiscardHandler)})
	if store.codecs, _, _ = newCookieCodecs([][]byte{testHashKey, testBlockKey, otherHashKey, nil}); len(store.codecs) != 2 {
		f.Fatal("want two cookie codecs")
	}
	encode := func(name string, value []byte, codecs ...securecookie.Codec) string {
		v, err := securecookie.EncodeMulti(name, value, codecs...)
		if err != nil {
			f.Fatal(err)
		}
		return v
	}
	id := newSessionID()
	encrypted := encode(testSessionName, []byte(id), store.codecs[0])
	signed := encode(testSessionName, []byte(id), store.codecs[1])
	for _, v := range []string{encrypted, signed} {
		if got, err := store.decodeCookie(testSessionName, v); err != nil || got != id {
			f.Fatalf("decodeCookie of a valid cookie = %q, %v; want %q", got, err, id)
		}
	}
	for _, seed := range []string{
		encrypted,
		signed,
		encrypted[:len(encrypted)/2],
		signed[:len(signed)-1],
		flipByte(encrypted, len(encrypted)/3),
		flipByte(signed, len(signed)-2),
		encode(testSessionName, []byte("short"), store.codecs[0]),                       // valid signature, malformed ID
		encode(testSessionName, []byte(id+"="), store.codecs[1]),                        // padded ID
		encode(testSessionName, []byte(strings.Repeat("A", idLength)), store.codecs[1]), // valid form
		encode("other", []byte(id), store.codecs[0]),                                    // signed for another name
		encode(testSessionName, []byte{}, store.codecs[1]),
		"",
		"|",
		"||",
		"MTcwMDAwMDAwMHx8",
		"\"quoted\"",
		"a;b=c",
		"\x00\xff\xfe",
		strings.Repeat("A", 5000),
		"ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
	} {
		f.Add(seed)
	}

	f.Fuzz(func(t *testing.T, value string) {
		id, err := store.decodeCookie(testSessionName, value)
		switch {
		case err == nil && !validSessionID(id):
			t.Fatalf("decodeCookie(%q) = %q, an invalid session ID, and no error", value, id)
		case err != nil && !errors.Is(err, ErrInvalidCookie):
			t.Fatalf("decodeCookie(%q) error %v does not wrap ErrInvalidCookie", value, err)
		case err != nil && id != "":
			t.Fatalf("decodeCookie(%q) = %q with error %v", value, id, err)
		}

		// What reaches the store is the cookie as net/http parses it from
		// the request, which may differ from value (or be absent).
		req, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
		req.Header.Set("Cookie", testSessionName+"="+value)
		c, cerr := req.Cookie(testSessionName)
		if cerr == nil {
			if _, err := store.decodeCookie(testSessionName, c.Value); err == nil {
				return // a valid cookie: New would query the (unreachable) database
			}
		}
		storeCmds.reset()
		s, err := store.New(req, testSessionName)
		if s == nil || !s.IsNew || s.ID != "" || len(s.Values) != 0 || s.Options == nil {
			t.Fatalf("New with cookie %q = %+v, want a fresh session", value, s)
		}
		if cerr == nil && !errors.Is(err, ErrInvalidCookie) {
			t.Fatalf("New with cookie %q: error %v, want ErrInvalidCookie", value, err)
		}
		if cerr != nil && err != nil {
			t.Fatalf("New without a parsable cookie: error %v, want none", err)
		}
		if n := storeCmds.count.Load(); n != 0 {
			t.Fatalf("New with cookie %q sent %d commands, want none", value, n)
		}
	})
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
		f := sealedFields{docID: fuzzDocID, createdAt: now, updatedAt: now, expiresAt: expiresAt, data: data}
		mac := sealer.seal(&f)
		return marshal(newDocument(f, mac))
	}
	later := now.Add(time.Hour)
	valid := sealed(gobData, later)
	withJSON := sealed(jsonData, later)
	empty := sealed(nil, now)
	var docs [][]byte
	docs = append(docs, valid, withJSON, empty)
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
		data: []byte{0x0d, 0x7f, 0x04}}, []byte("forged mac"))))
	spy := &spyCodec{}
	store := &Store{cfg: Config{Codec: spy}, sealer: testSealer(f)}
	f.Fuzz(func(t *testing.T, raw []byte) {
		spy.decoded = nil
		doc, values, err := store.decodeStored(fuzzDocID, raw)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			if spy.decoded != nil && !store.sealer.verify(doc.withData(spy.decoded), doc.mac) {
				t.Fatalf("data with a bad MAC reached the codec: %x", spy.decoded)
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

// fuzzSameValues reports whether two decoded session values are equal.
// reflect.DeepEqual says NaN != NaN, and gob round-trips a float NaN as NaN,
// so values holding a NaN are compared by their printed form instead (fmt
// prints maps sorted by key).
func fuzzSameValues(a, b map[any]any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	sa, sb := fmt.Sprintf("%#v", a), fmt.Sprintf("%#v", b)
	return sa == sb && strings.Contains(sa, "NaN")
}

// fuzzRoundTrip checks a codec on arbitrary bytes: Decode must not panic,
// and what it decodes must survive Encode then Decode where Encode succeeds.
func fuzzRoundTrip(t *testing.T, c Codec, data []byte) {
	values, err := c.Decode(data)
	if err != nil {
		if values != nil {
			t.Fatalf("Decode returned values %v with error %v", values, err)
		}
		return
	}
	if values == nil {
		t.Fatal("Decode returned nil values and no error")
	}
	enc, err := c.Encode(values)
	if err != nil {
		return // decodable but not encodable (for example a nil interface value)
	}
	back, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("Decode(Encode(%#v)): %v", values, err)
	}
	if !fuzzSameValues(values, back) {
		t.Fatalf("round trip changed the values:\n got %#v\nwant %#v", back, values)
	}
}

// FuzzGobCodec checks that session values built from arbitrary inputs
// survive GobCodec's Encode then Decode. (It does not feed Decode arbitrary
// bytes: encoding/gob is not hardened against hostile input, which is why
// the store checks a MAC before decoding; see FuzzDecodeDocument.)
func FuzzGobCodec(f *testing.F) {
	f.Add("user", "alice", int64(42), []byte{0, 1, 2}, 3.5, true)
	f.Add("", "", int64(0), []byte{}, 0.0, false)
	f.Add("é\x00", "\xff\xfe", int64(-1<<62), []byte(nil), math.Inf(-1), true)
	f.Add("nan", "x", int64(1<<62), bytes.Repeat([]byte{0xff}, 300), math.NaN(), false)
	f.Fuzz(func(t *testing.T, key, s string, n int64, b []byte, fl float64, flag bool) {
		values := map[any]any{
			key:      s,
			n:        []string{s, key},
			"bytes":  b,
			"float":  fl,
			"flag":   flag,
			"nested": []any{s, n, map[string]int{key: int(n % 1000)}},
		}
		data, err := GobCodec{}.Encode(values)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", values, err)
		}
		back, err := GobCodec{}.Decode(data)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)): %v", values, err)
		}
		if len(b) == 0 { // gob does not distinguish nil and empty slices
			values["bytes"] = back["bytes"]
		}
		if !fuzzSameValues(values, back) {
			t.Fatalf("round trip changed the values:\n got %#v\nwant %#v", back, values)
		}
	})
}

// FuzzJSONCodec checks JSONCodec on arbitrary bytes.
func FuzzJSONCodec(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"user":"alice","n":42}`,
		`{"nested":{"x":[1,"two",null,true,{"y":-0.5e-3}]}}`,
		`{"a":1,"a":2}`,
		`{"big":1e308,"small":5e-324,"neg":-0}`,
		`{"huge":1e400}`,
		`{"s":"\u00e9\ud83d\ude00\u0000"}`,
		"{\"bad\":\"\xff\xfe\"}",
		`null`,
		`[]`,
		`"string"`,
		`{"unterminated":`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip(t, JSONCodec{}, data)
		if values, err := (JSONCodec{}).Decode(data); err == nil && !json.Valid(data) {
			t.Fatalf("Decode accepted invalid JSON %q as %v", data, values)
		}
	})
}

// testSealer returns the document sealer of a store keyed with testHashKey.
func testSealer(tb testing.TB) *dataSealer {
	tb.Helper()
	s, err := newDataSealer([][]byte{testHashKey})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// withData returns the document's sealed fields with other data.
func (s storedSession) withData(data []byte) sealedFields {
	f := s.sealedFields
	f.data = data
	return f
}
