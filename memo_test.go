package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMemoKeepsTwoGenerations(t *testing.T) {
	m := newMemo[int](100)
	for i := range 10 {
		m.put(fmt.Sprint(i), i, 30)
	}
	// 30 bytes each, 100 a generation: 0–2, 3–5 and 6–8 filled a generation each,
	// and 9 started the fourth.
	for i := range 10 {
		v, ok := m.get(fmt.Sprint(i))
		if want := i >= 6; ok != want || ok && v != i {
			t.Errorf("get(%d) = %d, %v; want it held: %v", i, v, ok, want)
		}
	}
}

func TestCloneValues(t *testing.T) {
	when := time.Date(2026, 11, 28, 3, 0, 0, 0, time.FixedZone("", 3600))
	copied := map[any]any{"s": "x", "i": 7, "u": uint8(1), "f": 1.5, "b": true, "t": when, "nil": nil,
		"bytes": []byte("ab"), "strings": []string{"a", "b"}, "_flash": []any{"hi", 2}, "none": []string(nil)}
	if _, ok := copyable(copied); !ok {
		t.Fatalf("copyable(%v) = false", copied)
	}
	got := cloneValues(copied)
	if !reflect.DeepEqual(got, copied) {
		t.Fatalf("cloneValues = %v; want a copy of %v", got, copied)
	}
	got["s"] = "changed"
	got["bytes"].([]byte)[0] = 'z'
	got["strings"].([]string)[0] = "z"
	got["_flash"].([]any)[0] = "z"
	if copied["s"] != "x" || string(copied["bytes"].([]byte)) != "ab" || copied["strings"].([]string)[0] != "a" ||
		copied["_flash"].([]any)[0] != "hi" {
		t.Fatalf("changing the copy changed the original: %v", copied)
	}
	for name, values := range map[string]map[any]any{
		"nil":            nil,
		"a nested map":   {"m": map[string]any{"a": 1}},
		"a list of maps": {"_flash": []any{"hi", map[string]any{}}},
		"a pointer":      {"p": new(int)},
		"a struct":       {"c": codecProfile{}},
		"a struct key":   {codecProfile{}: 1},
	} {
		if _, ok := copyable(values); ok {
			t.Errorf("%s: copyable; want not (the codec decodes)", name)
		}
	}
	// What a memo counts grows with the elements, whatever their encoding's size.
	if size, _ := copyable(map[any]any{"e": make([]string, 1000), "n": make([]any, 1000)}); size < 32_000 {
		t.Errorf("copyable counts %d bytes for 2,000 empty elements; want at least 32,000", size)
	}
}

// countingCodec is the default codec, counting its decodes.
type countingCodec struct {
	compactCodec
	decodes atomic.Int64
}

func (c *countingCodec) Decode(data []byte) (map[any]any, error) {
	c.decodes.Add(1)
	return c.compactCodec.Decode(data)
}

// TestLoadsRememberDocuments: a session's later requests, whose document is
// unchanged, are served from the memo, from the third without the codec; each load gets
// values of its own, and a document changed in any byte is checked anew.
func TestLoadsRememberDocuments(t *testing.T) {
	codec := &countingCodec{}
	f := newFixture(t, Config{Codec: codec})
	want := map[any]any{"uid": 7, "roles": []string{"member"}, "_flash": []any{"hi"}, "token": []byte("t")}
	b, id := saveNewSession(t, f, want)
	for i := range 4 {
		s, err := loadSession(t, f, b)
		if err != nil || !reflect.DeepEqual(s.Values, want) {
			t.Fatalf("load %d: values %v, %v; want %v", i, s.Values, err, want)
		}
		s.Values["roles"].([]string)[0] = "admin" // a handler's change, never saved
		s.Values["_flash"].([]any)[0] = "bye"
		s.Values["token"].([]byte)[0] = 'x'
		delete(s.Values, "uid")
	}
	if n := codec.decodes.Load(); n != 2 {
		t.Errorf("four loads decoded %d times; want 2, the first two (the second keeps a copy)", n)
	}
	tamper := bson.D{{Key: "$set", Value: bson.D{{Key: fieldRev, Value: int64(9)}}}}
	if _, err := f.coll.UpdateOne(context.Background(), idFilter(docID(id)), tamper); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSession(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
		t.Fatalf("after the document changed: err %v, IsNew %v; want ErrDecode and a new session", err, s.IsNew)
	}
}

// TestLoadsDecodeWhatTheyCannotCopy: values copyValues refuses are decoded
// for every load, and each load's are its own.
func TestLoadsDecodeWhatTheyCannotCopy(t *testing.T) {
	codec := &countingCodec{}
	f := newFixture(t, Config{Codec: codec})
	want := map[any]any{"prefs": map[string]any{"theme": "dark"}}
	b, _ := saveNewSession(t, f, want)
	for i := range 3 {
		s, err := loadSession(t, f, b)
		if err != nil || !reflect.DeepEqual(s.Values, want) {
			t.Fatalf("load %d: values %v, %v; want %v", i, s.Values, err, want)
		}
		s.Values["prefs"].(map[string]any)["theme"] = "light"
	}
	if n := codec.decodes.Load(); n != 3 {
		t.Errorf("three loads decoded %d times; want 3", n)
	}
}

// TestRememberedCookies: a cookie value the store verified is taken again
// only under its own name, and one signed with an older key pair is still
// signed anew with the current one.
func TestRememberedCookies(t *testing.T) {
	f := newFixture(t, Config{}, testHashKey, nil, otherHashKey, nil)
	token := freshToken()
	old := agedCookie(testSessionName, token, otherHashKey, 0)
	for i := range 2 {
		got, err := f.store.cookies.token(testSessionName, old)
		if err != nil || got.token != token || got.value != "" {
			t.Fatalf("token %d = %+v, %v; want token %q without its value (an older pair signed it)", i, got, err, token)
		}
	}
	if _, err := f.store.cookies.token("other", old); !errors.Is(err, ErrInvalidCookie) {
		t.Fatalf("the value under another name: err %v; want ErrInvalidCookie", err)
	}
	current := signedCookie(t, f.store)
	for i := range 2 {
		if got, err := f.store.cookies.token(testSessionName, current); err != nil || got.value != current {
			t.Fatalf("token %d of a current cookie = %+v, %v; want its value kept", i, got, err)
		}
	}
	if _, ok := f.store.cookies.verified.get(old); !ok {
		t.Error("the memo does not hold the cookie it verified")
	}
}

// TestRememberedCookiesHoldNoHeader: the memo keeps a cookie value of its
// own, not a slice of the request's header line, which may be far longer.
func TestRememberedCookiesHoldNoHeader(t *testing.T) {
	f := newFixture(t, Config{})
	line := "pad=" + strings.Repeat("p", 4000) + "; " + testSessionName + "=" + signedCookie(t, f.store)
	r := &http.Request{Header: http.Header{"Cookie": {line}}}
	if tokens, err := f.store.cookies.tokens(r, testSessionName, nil); len(tokens) != 1 || err != nil {
		t.Fatalf("tokens = %v, %v; want the session's", tokens, err)
	}
	from, to := uintptr(unsafe.Pointer(unsafe.StringData(line))), uintptr(unsafe.Pointer(unsafe.StringData(line)))+uintptr(len(line))
	m := f.store.cookies.verified
	for value, v := range m.cur {
		for _, s := range []string{value, v.token.value, v.token.token} {
			if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); from <= p && p < to {
				t.Fatalf("the memo holds %.20q…, a slice of the request's header line", s)
			}
		}
	}
}

// BenchmarkOpenLoaded is a load's opening of its document: open alone (as
// before the memo), remembered (the session's next request), and first
// (a document the memo does not hold in these bytes, which it copies).
func BenchmarkOpenLoaded(b *testing.B) {
	f := newFixture(b, Config{Expiry: ExpiryNone})
	values := map[any]any{"uid": 100_000, "name": "Chloé Nguyen", "roles": []string{"member", "editor"},
		"loginAt": time.Now().UTC().Truncate(time.Second), "counter": 0, "_flash": []any{"Welcome back!"}}
	sv := newSaving(b, f.store, values, time.Now())
	d := f.store.document(sv)
	sv.st.rev = 1
	d2 := f.store.document(sv)
	raws := []bson.Raw{d.raw(), d2.raw()}
	open := map[string]func(i int) error{
		"open":       func(int) error { _, _, _, err := f.store.open(raws[0]); return err },
		"remembered": func(int) error { _, _, _, err := f.store.openLoaded(raws[0], sv.chain); return err },
		"first":      func(i int) error { _, _, _, err := f.store.openLoaded(raws[i%2], sv.chain); return err },
	}
	for _, name := range []string{"open", "remembered", "first"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := open[name](i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// aliasingCodec decodes values that hold the data it was given, as a
// codec of an application's may.
type aliasingCodec struct{ compactCodec }

func (aliasingCodec) Decode(data []byte) (map[any]any, error) {
	return map[any]any{"data": data}, nil
}

// TestRememberedDocumentsOfAnotherCodec: a handler that changes what an
// application's codec decoded, in the data that codec was given, changes
// no later load's values, with values encrypted or not.
func TestRememberedDocumentsOfAnotherCodec(t *testing.T) {
	for name, keys := range map[string][][]byte{"signed": {testHashKey}, "encrypted": {testHashKey, testBlockKey}} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Config{Codec: aliasingCodec{}}, keys...)
			b, _ := saveNewSession(t, f, map[any]any{"uid": 7})
			var first []byte
			for i := range 3 {
				s, err := loadSession(t, f, b)
				data, _ := s.Values["data"].([]byte)
				if err != nil || len(data) == 0 || first != nil && !bytes.Equal(data, first) {
					t.Fatalf("load %d: values %v, %v; want the data of the first load, %v", i, s.Values, err, first)
				}
				if first == nil {
					first = bytes.Clone(data)
				}
				data[len(data)-1] ^= 0xff // the handler's change, never saved
			}
		})
	}
}
