package mongostore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// format1Fixture holds session documents of format 1, the store's one
// format, which every later version must keep loading
// (TestFormat1DocumentsLoad). TestWriteFormat1Fixture wrote it, with
//
//	go test -run '^TestWriteFormat1Fixture$' -update-format1 .
//
// and the keys testHashKey and testBlockKey of helpers_test.go. Each line
// is a case of format1Cases, a session ID and its document in hex; lines
// starting with # are comments.
const format1Fixture = "testdata/format1-documents.txt"

// format1Int32Fixture holds the same sessions in format 1 with maxAge an
// int32, as format 1's first commits wrote it (e3496e5 to bbe0d71).
const format1Int32Fixture = "testdata/format1-int32-documents.txt"

// format2Fixture holds the same sessions in format 2 (format 1 with the
// chain's lineage in the MAC, and in a field after a RegenerateID), as the
// store wrote them until format 3, which every later version must load too.
const format2Fixture = "testdata/format2-documents.txt"

// format3Fixture holds the same sessions in format 3, the one written now
// (one document per sign-in chain: _id the chain ID, sid the hash of the
// secret), which every later version must load too.
const format3Fixture = "testdata/format3-documents.txt"

var updateFixture = flag.Bool("update-fixture", false, "TestWriteFixture rewrites "+format3Fixture)

// The sessions of the fixture were created at format1Start and are loaded
// at format1LoadAt, when every one is live: far in the future, so that no
// TTL monitor deletes them while a test runs.
var (
	format1Start  = time.Date(2099, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	format1LoadAt = format1Start.Add(90 * time.Minute)
)

// fixtureProfile is a custom type in a fixture session: the default codec
// encodes it with its gob fallback. Its gob name is in the fixture.
type fixtureProfile struct {
	ID    int64
	Name  string
	Roles []string
	Seen  time.Time
}

func init() { gob.RegisterName("mongostore.fixtureProfile", fixtureProfile{}) }

// format1Case is a session of the fixture: how it was written, and what
// loads.
type format1Case struct {
	name      string
	encrypted bool        // keys testHashKey and testBlockKey; otherwise testHashKey alone
	codec     Codec       // nil for the default
	values    map[any]any // as the application set them, SetOwner aside
	want      map[any]any // as they load, SetOwner aside; nil for values
	owner     string      // SetOwner's arguments
	device    string
	maxAge    int             // the session's Options.MaxAge
	saves     []time.Duration // when it was saved, after format1Start: the first inserted it
	idle      time.Duration   // how long it lives after a save
}

func (c format1Case) keys() [][]byte {
	if c.encrypted {
		return [][]byte{testHashKey, testBlockKey}
	}
	return [][]byte{testHashKey}
}

// loaded returns the values the session loads with.
func (c format1Case) loaded() map[any]any {
	want := make(map[any]any)
	src := c.want
	if src == nil {
		src = c.values
	}
	for k, v := range src {
		want[k] = v
	}
	if c.owner != "" {
		want[ownerKey] = c.owner
		if c.device != "" {
			want[deviceKey] = c.device
		}
	}
	return want
}

// times returns the times stored for the session.
func (c format1Case) times() SessionTimes {
	updated := format1Start.Add(c.saves[len(c.saves)-1])
	return SessionTimes{CreatedAt: format1Start, UpdatedAt: updated, ExpiresAt: updated.Add(c.idle)}
}

// format1Cases are the sessions of the fixture: plain and encrypted, with
// and without an owner, values of every type the compact codec has a form
// for, one session through JSONCodec and one through the gob fallback.
var format1Cases = []format1Case{
	{
		name: "plain", maxAge: 24 * 60 * 60, saves: []time.Duration{0}, idle: 24 * time.Hour,
		values: map[any]any{
			"nil": nil, "string": "héllo", "empty": "", "true": true, "false": false,
			"int": -42, "int8": int8(-8), "int16": int16(1600), "int32": int32(-1 << 31), "int64": int64(1 << 62),
			"uint": uint(42), "uint8": uint8(255), "uint16": uint16(65535), "uint32": uint32(1 << 31), "uint64": uint64(1<<64 - 1),
			"float32": float32(1.5), "float64": 3.141592653589793,
			"time":    time.Date(2098, 11, 22, 10, 4, 5, 6, time.FixedZone("CET", 3600)),
			"bytes":   []byte{0, 1, 255},
			"strings": []string{"admin", "", "dev"},
			"_flash":  []any{"saved!", 3},
			"profile": map[string]any{"name": "ada", "tags": []string{"x"}, "nested": map[string]any{"deep": true}},
		},
	},
	{
		name: "plain-owner", maxAge: 0, saves: []time.Duration{0, time.Hour}, idle: 24 * time.Hour,
		values: map[any]any{"user": "ada", "visits": 2},
		owner:  "ada", device: "Firefox on Linux",
	},
	{
		name: "encrypted", encrypted: true, maxAge: 3600, saves: []time.Duration{0, 45 * time.Minute}, idle: time.Hour,
		values: map[any]any{"card": "4111-1111-1111-1111", "n": int64(7), "roles": []string{"admin"},
			"seen": time.Date(2098, 12, 31, 23, 59, 59, 0, time.UTC)},
	},
	{
		name: "encrypted-owner", encrypted: true, maxAge: 24 * 60 * 60, saves: []time.Duration{0}, idle: 24 * time.Hour,
		values: map[any]any{"user": "ada", "_flash": []any{"welcome back"}},
		owner:  "ada", device: "Safari on iPhone",
	},
	{
		name: "json", codec: JSONCodec{}, maxAge: 24 * 60 * 60, saves: []time.Duration{0}, idle: 24 * time.Hour,
		values: map[any]any{"user": "grace", "n": 7, "roles": []string{"admin"}},
		want:   map[any]any{"user": "grace", "n": float64(7), "roles": []any{"admin"}},
	},
	{
		name: "gob-fallback", encrypted: true, maxAge: 7200, saves: []time.Duration{0}, idle: 2 * time.Hour,
		values: map[any]any{
			"profile": fixtureProfile{ID: 7, Name: "grace", Roles: []string{"admin"}, Seen: time.Date(2098, 1, 2, 3, 4, 5, 0, time.UTC)},
			42:        "answer",
		},
		owner: "grace",
	},
}

// format1Document is a line of the fixture.
type format1Document struct {
	name, sessionID string
	raw             bson.Raw
}

// readFormat1Fixture reads format1Fixture.
func readFormat1Fixture(tb testing.TB, path string) []format1Document {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var docs []format1Document
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			tb.Fatalf("bad fixture line %q", line)
		}
		raw, err := hex.DecodeString(fields[2])
		if err != nil {
			tb.Fatalf("bad fixture line %q: %v", line, err)
		}
		docs = append(docs, format1Document{fields[0], fields[1], raw})
	}
	return docs
}

// TestFormat1DocumentsLoad checks that the documents of format1Fixture,
// written when format 1 was made, and of format2Fixture, load with their
// values, times, MaxAge, owner and handle, and are saved again in format 2.
func TestFormat1DocumentsLoad(t *testing.T) {
	for path, format := range map[string]int64{format1Fixture: format1, format1Int32Fixture: format1, format2Fixture: format2, format3Fixture: formatVersion} {
		docs := readFormat1Fixture(t, path)
		if len(docs) != len(format1Cases) {
			t.Fatalf("%s: %d fixture documents, want %d", path, len(docs), len(format1Cases))
		}
		for i, doc := range docs {
			if doc.name != format1Cases[i].name {
				t.Fatalf("%s: fixture document %d is %q, want %q", path, i, doc.name, format1Cases[i].name)
			}
			t.Run(strings.TrimSuffix(filepath.Base(path), "-documents.txt")+"/"+doc.name, func(t *testing.T) { checkFormat1Document(t, format1Cases[i], doc, format) })
		}
	}
}

// TestWriteFixture writes the sessions of format1Cases with the current
// code and checks them as TestFormat1DocumentsLoad does; with
// -update-fixture it writes them to format2Fixture.
func TestWriteFixture(t *testing.T) {
	var out bytes.Buffer
	out.WriteString(`# Session documents of format 3, which every later version must load
# (TestFormat1DocumentsLoad). Written by
#	go test -run '^TestWriteFixture$' -update-fixture .
# with the keys testHashKey (and testBlockKey for the encrypted ones) of
# helpers_test.go. One line each: the case of format1Cases, the session's
# token (its cookie is signed with the test keys), the document in hex.
`)
	var docs []format1Document
	for _, c := range format1Cases {
		t.Run(c.name, func(t *testing.T) {
			doc := writeFormat1Document(t, c)
			docs = append(docs, doc)
			fmt.Fprintf(&out, "%s %s %x\n", doc.name, doc.sessionID, []byte(doc.raw))
		})
	}
	if t.Failed() {
		return
	}
	for i, doc := range docs {
		t.Run("check/"+doc.name, func(t *testing.T) { checkFormat1Document(t, format1Cases[i], doc, formatVersion) })
	}
	if *updateFixture && !t.Failed() {
		if err := os.WriteFile(format3Fixture, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", format3Fixture)
	}
}

// writeFormat1Document saves the session of c through a store and returns
// its document.
func writeFormat1Document(t *testing.T, c format1Case) format1Document {
	clock := &fakeClock{now: format1Start}
	f := newFixture(t, Config{Now: clock.Now, Codec: c.codec, Expiry: ExpiryNone}, c.keys()...)
	b := newBrowser()
	var id string
	for i, after := range c.saves {
		clock.Advance(format1Start.Add(after).Sub(clock.Now()))
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew != (i == 0) {
				t.Fatalf("save %d: IsNew=%v, %v", i, s.IsNew, err)
			}
			if i == 0 {
				for k, v := range c.values {
					s.Values[k] = v
				}
				SetOwner(s, c.owner, c.device)
				s.Options.MaxAge = c.maxAge
			}
			if err := s.Save(r, w); err != nil {
				t.Fatalf("save %d: %v", i, err)
			}
			id = s.ID
		})
	}
	return format1Document{c.name, id, storedDocument(t, f, id)}
}

// checkFormat1Document checks that doc, the document of the session of c,
// loads as c says through a store on a fresh collection, and that its next
// save stores it in format 3 in place (same _id, the same token loads it
// again), its handle unchanged. format is doc's.
func checkFormat1Document(t *testing.T, c format1Case, doc format1Document, format int64) {
	t.Helper()
	ctx := context.Background()
	rev := int64(len(c.saves))
	checkRaw := func(raw bson.Raw, rev int64) {
		t.Helper()
		if v, ok := raw.Lookup(fieldVersion).AsInt64OK(); !ok || v != format {
			t.Fatalf("version %v, want %d", raw.Lookup(fieldVersion), format)
		}
		if _, err := raw.LookupErr(fieldLineage); err == nil {
			t.Fatalf("a lineage field in the first document of a chain")
		}
		if got, ok := raw.Lookup(fieldRev).AsInt64OK(); !ok || got != rev {
			t.Fatalf("rev %v, want %d", raw.Lookup(fieldRev), rev)
		}
		if id, _ := raw.Lookup(fieldID).StringValueOK(); id != docID(doc.sessionID) {
			t.Fatalf("_id %q, want the chain ID of the token", id)
		}
		if sid, ok := raw.Lookup(fieldSID).StringValueOK(); (format == formatVersion) != ok {
			t.Fatalf("sid %q in format %d", sid, format)
		} else if _, secret, _ := splitToken(doc.sessionID); ok && !sidMatches(sid, secret) {
			t.Fatalf("sid %q, want the SHA-256 of the token's secret", sid)
		}
		if _, err := raw.LookupErr(fieldOwner); (err == nil) != (c.owner != "") {
			t.Fatalf("owner field: %v; want one only with an owner", err)
		}
		_, data := raw.Lookup(fieldData).Binary()
		if want := map[bool]byte{false: envelopePlain, true: envelopeGCM}[c.encrypted]; len(data) == 0 || data[0] != want {
			t.Fatalf("data envelope %x, want %#x", data[:min(len(data), 1)], want)
		}
	}
	checkRaw(doc.raw, rev)

	clock := &fakeClock{now: format1LoadAt}
	f := newFixture(t, Config{Now: clock.Now, Codec: c.codec}, c.keys()...)
	if _, err := f.coll.InsertOne(ctx, doc.raw); err != nil {
		t.Fatal(err)
	}
	b := cookieFor(t, f.store, doc.sessionID)
	want, times := c.loaded(), c.times()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil || s.IsNew || s.ID != doc.sessionID {
			t.Fatalf("load: IsNew=%v ID=%q err=%v", s.IsNew, s.ID, err)
		}
		if !fuzzSameValues(s.Values, want) {
			t.Fatalf("values\n got %#v\nwant %#v", s.Values, want)
		}
		if s.Options.MaxAge != c.maxAge {
			t.Fatalf("Options.MaxAge %d, want %d", s.Options.MaxAge, c.maxAge)
		}
		if got, ok := f.store.Times(s); !ok || !sameTimes(got, times) {
			t.Fatalf("Times = %+v, %v; want %+v", got, ok, times)
		}
		listed, err := f.store.ListSessions(ctx, c.owner, s)
		if c.owner == "" {
			listed, err = f.store.ListSessions(ctx, "ada", s)
			if err != nil || len(listed) != 0 {
				t.Fatalf("a session without an owner listed: %+v, %v", listed, err)
			}
			return
		}
		if err != nil || len(listed) != 1 {
			t.Fatalf("ListSessions(%q) = %+v, %v; want the session", c.owner, listed, err)
		}
		if l := listed[0]; !l.Current || l.Device != c.device || l.Handle != handle(docID(doc.sessionID)) || !sameTimes(l.SessionTimes, times) {
			t.Fatalf("listed %+v; want the current session, device %q, times %+v, the handle of its _id", l, c.device, times)
		}
	})

	// Its next save is format 3, in place, one revision later, created when
	// it was, and loads.
	clock.Advance(time.Minute)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil || s.IsNew {
			t.Fatalf("load: IsNew=%v, %v", s.IsNew, err)
		}
		s.Values["again"] = "yes"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	raw := storedDocument(t, f, doc.sessionID)
	format = formatVersion
	checkRaw(raw, rev+1)
	if got := raw.Lookup(fieldCreatedAt).Time(); !got.Equal(format1Start) {
		t.Fatalf("createdAt %v after a save, want %v", got, format1Start)
	}
	want["again"] = "yes"
	if s, err := loadSession(t, f, b); err != nil || !fuzzSameValues(s.Values, want) || s.Options.MaxAge != c.maxAge {
		t.Fatalf("saved again: %#v (MaxAge %d), %v; want %#v", s.Values, s.Options.MaxAge, err, want)
	}
}

// cookieFor returns a browser holding a valid cookie for session ID id.
func cookieFor(t *testing.T, s *Store, id string) *browser {
	t.Helper()
	v, err := s.cookies.encode(testSessionName, id)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser()
	b.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: v}
	return b
}

// TestDocumentMACCoversTrustedFields checks that changing a field the store
// trusts in the database makes the document unreadable: it is a lost
// session, not a longer-lived one or one that is never touched again.
func TestDocumentMACCoversTrustedFields(t *testing.T) {
	later := bson.NewDateTimeFromTime(time.Now().Add(365 * 24 * time.Hour))
	set := func(field string, value any) bson.D {
		return bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: value}}}}
	}
	for _, tt := range []struct {
		name   string
		change bson.D
	}{
		{"expiresAt pushed out", set(fieldExpiresAt, later)},
		{"createdAt moved", set(fieldCreatedAt, later)},
		{"updatedAt moved (touches suppressed)", set(fieldUpdatedAt, later)},
		{"data replaced", set(fieldData, bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte("x")})},
		{"rev changed", set(fieldRev, int64(7))},
		{"maxAge changed", set(fieldMaxAge, int32(365*24*60*60))},
		{"version removed (no legacy format)", bson.D{{Key: "$unset", Value: bson.D{{Key: fieldVersion, Value: ""}}}}},
		{"unknown version", set(fieldVersion, int32(99))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, id := saveNewSession(t, f, map[any]any{"k": "v"})
			if _, err := f.coll.UpdateOne(context.Background(), idFilter(docID(id)), tt.change); err != nil {
				t.Fatal(err)
			}
			if s, err := loadSession(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
				t.Fatalf("IsNew=%v err=%v; want a fresh session and ErrDecode", s.IsNew, err)
			}
		})
	}
}

// TestMACKeysAreDerived checks the key derivation: HKDF, one MAC key per
// hash key, each key distinct from the application's keys and from the
// others.
func TestMACKeysAreDerived(t *testing.T) {
	s := newSealer([]keyPair{{hash: testHashKey}, {hash: otherHashKey}})
	if len(s.macs) != 2 || len(s.ownerKeys) != 2 {
		t.Fatalf("%d MAC keys, %d owner keys; want 2 each", len(s.macs), len(s.ownerKeys))
	}
	seen := map[string]bool{string(testHashKey): true, string(otherHashKey): true, string(testBlockKey): true}
	keys := append([][]byte{derive(testBlockKey, encryptionKeyInfo)}, s.ownerKeys...)
	for _, hashKey := range [][]byte{testHashKey, otherHashKey} {
		keys = append(keys, derive(hashKey, macKeyInfo))
	}
	for _, k := range keys {
		if len(k) != 32 || seen[string(k)] {
			t.Fatalf("key %x is not a fresh 32-byte key", k)
		}
		seen[string(k)] = true
	}
	d := document{id: "id", rev: 1, data: []byte("x")}
	s.seal(&d)
	if !s.verify(&d) {
		t.Fatal("a sealed document does not verify")
	}
	// A document sealed with the second key (before a rotation) verifies
	// too, but not with the first key alone.
	second := newSealer([]keyPair{{hash: otherHashKey}})
	old := document{id: "id", rev: 1, data: []byte("x")}
	second.seal(&old)
	if !s.verify(&old) || testSealer(t).verify(&old) {
		t.Fatal("a document sealed with the second key: wrong verification")
	}
}

// TestStoreKeepsItsOwnKeys checks that an application clearing its key
// buffers after NewStore (as a careful one does) changes nothing: cookies
// signed with a zero key are refused, and the session still loads.
func TestStoreKeepsItsOwnKeys(t *testing.T) {
	hash := bytes.Clone(testHashKey)
	f := newFixture(t, Config{Expiry: ExpiryNone}, hash)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	clear(hash)
	if s, err := loadSession(t, f, b); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("after the keys were cleared: %v, %v; want the session", s.Values, err)
	}
	forged := newBrowser()
	forged.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: agedCookie(testSessionName, freshToken(), make([]byte, 32), 0)}
	if _, err := loadSession(t, f, forged); !errors.Is(err, ErrInvalidCookie) {
		t.Errorf("a cookie signed with a zero key: %v, want ErrInvalidCookie", err)
	}
}

func TestDatabaseNeverHoldsRawSessionID(t *testing.T) {
	f := newFixture(t, Config{})
	_, token := saveNewSession(t, f, map[any]any{"k": "v"})
	chain, secret, ok := strings.Cut(token, ".")
	raw, err := secretEncoding.DecodeString(secret)
	if !ok || err != nil || len(raw) != idBytes || !validChainID(chain) {
		t.Fatalf("token %q: want a chain ID, a dot and a 256-bit secret", token)
	}
	cur, err := f.coll.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(context.Background(), &docs); err != nil || len(docs) != 1 {
		t.Fatalf("documents: %d, %v", len(docs), err)
	}
	if got := docs[0].Lookup(fieldID).StringValue(); got != chain {
		t.Fatalf("_id = %s, want the chain ID %s", got, chain)
	}
	sum := sha256.Sum256([]byte(secret))
	if got := docs[0].Lookup(fieldSID).StringValue(); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("sid = %s, want the SHA-256 of the secret", got)
	}
	if bytes.Contains(docs[0], []byte(secret)) || bytes.Contains(docs[0], raw) || strings.Contains(docs[0].String(), secret) {
		t.Fatal("the document contains the session's secret")
	}
}

// TestKeyRotation: a store given the new pair first and the old one after
// it reads the old pair's cookies and re-issues them with the new pair,
// which the old pair cannot read. Pairs that share a hash key all verify a
// cookie's signature: the one whose block key fits must still be tried.
func TestKeyRotation(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	otherBlockKey := bytesOf(0x44)
	for _, tc := range []struct {
		name     string
		old, new [][]byte
	}{
		{"new hash key, encryption off", [][]byte{otherHashKey, testBlockKey}, [][]byte{testHashKey, nil}},
		{"encryption on", [][]byte{testHashKey, nil}, [][]byte{testHashKey, testBlockKey}},
		{"encryption off", [][]byte{testHashKey, testBlockKey}, [][]byte{testHashKey, nil}},
		{"new block key", [][]byte{testHashKey, testBlockKey}, [][]byte{testHashKey, otherBlockKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newStore := func(keys ...[]byte) *storeFixture {
				s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, keys...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return &storeFixture{store: s, coll: coll, cmds: &commandLog{}}
			}
			oldKeys, onlyNew := newStore(tc.old...), newStore(tc.new...)
			rotated := newStore(append(slices.Clone(tc.new), tc.old...)...)
			b, _ := saveNewSession(t, oldKeys, map[any]any{"user": "ada"})
			if s, err := loadSession(t, rotated, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
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
			if s, err := loadSession(t, onlyNew, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
				t.Fatalf("re-issued cookie not signed with the new key: IsNew=%v err=%v", s.IsNew, err)
			}
			if s, err := loadSession(t, oldKeys, b); !s.IsNew || !errors.Is(err, ErrInvalidCookie) {
				t.Fatalf("old-key store read a new-key cookie: IsNew=%v err=%v", s.IsNew, err)
			}
		})
	}
}

// TestHashKeysGivenAsOnePair: NewStore(…, newHash, oldHash), meant as a
// rotation of hash keys, makes oldHash the block key of one pair, and every
// cookie signed with oldHash fails. The error says what happened and what
// to pass instead, and the store logs it once (the middleware logs no
// invalid cookie); the right call, newHash, nil, oldHash, nil, loads the
// session.
func TestHashKeysGivenAsOnePair(t *testing.T) {
	oldHash := testBlockKey // 32 bytes: an AES-256 key too
	f := newFixture(t, Config{Expiry: ExpiryNone}, oldHash)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	logs := &syncBuffer{}
	trap := storeOn(t, f.coll, Config{Expiry: ExpiryNone, Logger: testLogger(logs)}, testHashKey, oldHash)
	for range 2 {
		s, err := trap.Get(b.request(), testSessionName)
		if !errors.Is(err, ErrInvalidCookie) || !errors.Is(err, errBlockAsHash) || strings.Contains(err.Error(), "\n") || !s.IsNew {
			t.Fatalf("a cookie signed with the second key given: %v (new: %v); want ErrInvalidCookie saying the key is a block key", err, s.IsNew)
		}
	}
	if n := strings.Count(logs.String(), "mongostore: a session cookie was signed with the block key of a key pair, as a hash key: "+
		"NewStore takes key pairs (hash key, block key), so rotating hash keys alone is NewStore(ctx, coll, cfg, newHashKey, nil, oldHashKey, nil)"); n != 1 {
		t.Fatalf("the store logged the advice %d times, want once:\n%s", n, logs)
	}
	right := &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, nil, oldHash, nil), coll: f.coll}
	if s, err := loadSession(t, right, b); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("rotated as pairs: %v, %v", s.Values, err)
	}
	for _, c := range unusableCookies(t, f.store, b.cookies[testSessionName].Value) { // those oldHash did not sign do not say it
		if _, _, err := trap.cookies.decode(testSessionName, c.value); errors.Is(err, errBlockAsHash) != (c.name == "malformed ID") {
			t.Fatalf("cookie %s: %v", c.name, err)
		}
	}
}

// TestUndecodableCookiesGiveOneLine: a request whose cookies of the
// session's name all name documents the store cannot open gets one error,
// on one line (a log line each), that still wraps ErrDecode.
func TestUndecodableCookiesGiveOneLine(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	for _, user := range []string{"ada", "eve"} {
		b, id := saveNewSession(t, f, map[any]any{"user": user})
		if _, err := f.coll.UpdateOne(context.Background(), idFilter(docID(id)),
			bson.D{{Key: "$set", Value: bson.D{{Key: fieldData, Value: bson.Binary{Data: []byte("forged " + user)}}}}}); err != nil {
			t.Fatal(err)
		}
		r.AddCookie(&http.Cookie{Name: testSessionName, Value: b.cookies[testSessionName].Value})
	}
	s, err := f.store.Get(r, testSessionName)
	if !errors.Is(err, ErrDecode) || !s.IsNew {
		t.Fatalf("Get = IsNew %v, %v; want a fresh session and ErrDecode", s.IsNew, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("the error spans lines: %q", err)
	}
	if err == error(nil) || err != err { // == on the error must not panic
		t.Fatal("the error is not comparable")
	}
}

func TestForeignDataNeverReachesTheCodec(t *testing.T) {
	spy := &spyCodec{}
	f := newFixture(t, Config{Codec: spy})
	b, id := saveNewSession(t, f, map[any]any{"user": "ada"})
	id1 := docID(id)

	// Someone with write access to the collection, but not the app's keys,
	// replaces the data (a crafted gob stream can exhaust memory).
	hostile := append([]byte{envelopePlain, gobForm}, "\r\x7f\x04\x01\x02\xff0\x00\x01\x10\x01\x10\x00\x007\xff\x80"...)
	if _, err := f.coll.UpdateOne(context.Background(), idFilter(id1),
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldData, Value: bson.Binary{Data: hostile}}}}}); err != nil {
		t.Fatal(err)
	}
	spy.decoded = nil
	s, err := loadSession(t, f, b)
	if !errors.Is(err, ErrDecode) || !s.IsNew {
		t.Fatalf("Get = IsNew %v, %v; want a fresh session and ErrDecode", s.IsNew, err)
	}
	if spy.decoded != nil {
		t.Fatalf("the codec was given unauthenticated data %q", spy.decoded)
	}

	// Data moved from another session's document fails too: the MAC binds
	// the data to its _id.
	_, other := saveNewSession(t, f, map[any]any{"user": "eve"})
	otherDoc := storedDocument(t, f, other)
	if _, err := f.coll.UpdateOne(context.Background(), idFilter(id1),
		bson.D{{Key: "$set", Value: bson.D{
			{Key: fieldData, Value: otherDoc.Lookup(fieldData)},
			{Key: fieldMAC, Value: otherDoc.Lookup(fieldMAC)},
		}}}); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSession(t, f, b); !errors.Is(err, ErrDecode) || s.Values["user"] == "eve" {
		t.Fatalf("swapped data accepted: %v, %v", s.Values, err)
	}

	// A store whose keys rotated still reads documents sealed with the old key.
	rotated, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone, Codec: spy}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rotated.Close() })
	b2, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	rf := &storeFixture{store: rotated, coll: f.coll, cmds: f.cmds}
	if s, err := loadSession(t, rf, b2); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("rotated store: %v, %v", s.Values, err)
	}
}

// parsedDocument returns the parsed stored document of session ID id.
func parsedDocument(t *testing.T, f *storeFixture, id string) document {
	t.Helper()
	d, err := parseDocument(storedDocument(t, f, id))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestEncryptionAtRest(t *testing.T) {
	const secret = "card-4111-1111-1111-1111"
	t.Run("a dump shows no values", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNewSession(t, f, map[any]any{"card": secret, "user": "ada-lovelace"})
		doc := storedDocument(t, f, id)
		for _, plain := range []string{secret, "ada-lovelace", "card"} {
			if bytes.Contains(doc, []byte(plain)) {
				t.Fatalf("the stored document holds %q in clear", plain)
			}
		}
		if _, data := doc.Lookup(fieldData).Binary(); data[0] != envelopeGCM {
			t.Fatalf("data envelope %#x, want AES-GCM", data[0])
		}
		if s, err := loadSession(t, f, b); err != nil || s.Values["card"] != secret {
			t.Fatalf("reload: %v, %v", s.Values, err)
		}
	})
	t.Run("without a block key the values are only authenticated", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey)
		_, id := saveNewSession(t, f, map[any]any{"card": secret})
		if !bytes.Contains(storedDocument(t, f, id), []byte(secret)) {
			t.Fatal("the value is not in clear without a block key: is it encrypted with something else?")
		}
	})
	t.Run("tampered ciphertext, even with a valid MAC", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNewSession(t, f, map[any]any{"card": secret})
		d := parsedDocument(t, f, id)
		d.data = bytes.Clone(d.data)
		d.data[len(d.data)-1] ^= 1
		resealed(t, f, d)
		if s, err := loadSession(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
			t.Fatalf("IsNew=%v err=%v; want ErrDecode", s.IsNew, err)
		}
	})
	t.Run("ciphertext moved to another document", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		_, victim := saveNewSession(t, f, map[any]any{"user": "admin"})
		b, attacker := saveNewSession(t, f, map[any]any{"user": "mallory"})
		to := parsedDocument(t, f, victim)
		to.id = docID(attacker) // the MAC is recomputed: only the AEAD's binding to _id stops it
		resealed(t, f, to)
		if s, err := loadSession(t, f, b); !errors.Is(err, ErrDecode) || s.Values["user"] == "admin" {
			t.Fatalf("values %v err=%v; want ErrDecode", s.Values, err)
		}
	})
	t.Run("key rotation", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		b, id := saveNewSession(t, f, map[any]any{"card": secret})
		newBlock := bytes.Repeat([]byte{0x44}, 32)
		rotated := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, newBlock, testHashKey, testBlockKey)
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
		if s, err := loadSession(t, &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, newBlock)}, b); err != nil || s.Values["n"] != 1 {
			t.Fatalf("new keys only: %v, %v", s.Values, err)
		}
		// And a store that lost the block key cannot read it (given a cookie
		// it can read: the cookie was encrypted with the block key too).
		noBlock := &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey)}
		if _, err := loadSession(t, noBlock, cookieFor(t, noBlock.store, id)); !errors.Is(err, ErrDecode) {
			t.Fatalf("without the block key: %v, want ErrDecode", err)
		}
	})
	t.Run("a store without the block key says so", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
		_, id := saveNewSession(t, f, map[any]any{"card": secret})
		noBlock := &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey)}
		if _, err := loadSession(t, noBlock, cookieFor(t, noBlock.store, id)); !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), "no block key") {
			t.Fatalf("without the block key: %v, want ErrDecode saying so", err)
		}
	})
}

// resealed stores d as the document d.id, with a valid MAC: what someone
// holding the hash key (but not the block key) could write.
func resealed(t *testing.T, f *storeFixture, d document) {
	t.Helper()
	f.store.sealer.seal(&d)
	if _, err := f.coll.ReplaceOne(context.Background(), idFilter(d.id), d.raw()); err != nil {
		t.Fatal(err)
	}
}

// TestPlainDataRefusedWhenTheStoreEncrypts checks that a store with a
// block key refuses a document whose data is not encrypted, even under a
// valid MAC: whoever holds the hash key and can write to the collection
// cannot slip values past the encryption.
func TestPlainDataRefusedWhenTheStoreEncrypts(t *testing.T) {
	// Defect 9: the store decoded plain data under a valid MAC whatever its keys, so the hash key alone let one forge values.
	f := newFixture(t, Config{}, testHashKey, testBlockKey)
	owned := map[any]any{"user": "ada", ownerKey: "ada", deviceKey: "Firefox on Linux"}
	b, id := saveNewSession(t, f, owned)
	ctx := context.Background()
	if listed, err := f.store.ListSessions(ctx, "ada", nil); err != nil || len(listed) != 1 {
		t.Fatalf("ListSessions before = %+v, %v; want the session", listed, err)
	}
	forged := map[any]any{"user": "mallory", "admin": true, ownerKey: "ada", deviceKey: "Firefox on Linux"}
	plain, err := compactCodec{}.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	d := parsedDocument(t, f, id)
	d.data = append([]byte{envelopePlain}, plain...)
	resealed(t, f, d) // the owner field stays: the owner index still finds it
	s, err := loadSession(t, f, b)
	if !errors.Is(err, ErrDecode) || !s.IsNew || len(s.Values) != 0 {
		t.Fatalf("plain data loaded: IsNew=%v values=%v err=%v; want a new session and ErrDecode", s.IsNew, s.Values, err)
	}
	if listed, err := f.store.ListSessions(ctx, "ada", nil); err != nil || len(listed) != 0 {
		t.Fatalf("ListSessions after = %+v, %v; want nothing", listed, err)
	}
}
