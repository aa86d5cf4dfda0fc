package mongostore

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// codecProfile is a custom type stored in sessions, registered with gob as
// gorilla applications do: the compact codec has no form for it.
type codecProfile struct {
	ID   int64
	Name string
}

func init() {
	gob.Register(codecProfile{})
	gob.Register(map[string]int{})
}

// fuzzSameValues reports whether two decoded session values are equal.
// Times are compared by instant and zone offset (a round trip through gob or
// the compact codec gives an unnamed zone a new *Location, which DeepEqual
// tells apart). reflect.DeepEqual says NaN != NaN, and gob round-trips a
// float NaN as NaN, so values holding a NaN are compared by their printed
// form instead (fmt prints maps sorted by key).
func fuzzSameValues(a, b map[any]any) bool {
	na, nb := normalizeTimes(a), normalizeTimes(b)
	if reflect.DeepEqual(na, nb) {
		return true
	}
	sa, sb := fmt.Sprintf("%#v", na), fmt.Sprintf("%#v", nb)
	return sa == sb && strings.Contains(sa, "NaN")
}

// normalizeTimes returns v with every time.Time replaced by its RFC 3339
// form with nanoseconds and offset.
func normalizeTimes(v any) any {
	switch v := v.(type) {
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case map[any]any:
		m := make(map[any]any, len(v))
		for k, e := range v {
			m[k] = normalizeTimes(e)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = normalizeTimes(e)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = normalizeTimes(e)
		}
		return l
	}
	return v
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

// FuzzGobFallback checks that session values built from arbitrary inputs,
// which the compact codec has no form for (a non-string key), survive the
// default codec's Encode then Decode through its gob fallback. (It does not
// feed Decode arbitrary bytes: encoding/gob is not hardened against hostile
// input, which is why the store checks a MAC before decoding; see
// FuzzDecodeDocument.)
func FuzzGobFallback(f *testing.F) {
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
		data, err := compactCodec{}.Encode(values)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", values, err)
		}
		if data[0] != gobForm {
			t.Fatalf("Encode(%#v): form %q, want the gob fallback", values, data[:1])
		}
		back, err := compactCodec{}.Decode(data)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)): %v", values, err)
		}
		if len(b) == 0 { // gob does not distinguish nil and empty slices
			values["bytes"] = back["bytes"]
		}
		if !fuzzSameValues(values, back) {
			t.Fatalf("round trip changed the values:\n got %#v\nwant %#v", back, values)
		}
		// The fallback is gob's own encoding, behind the form byte.
		if direct, err := gobDecode(data[1:]); err != nil || !fuzzSameValues(direct, back) {
			t.Fatalf("gobDecode of the fallback's bytes: %#v, %v; want %#v", direct, err, back)
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

// compactSample holds one value of every type the compact codec encodes
// compactly, with its exact Go type.
func compactSample() map[any]any {
	return map[any]any{
		"nil": nil, "string": "héllo", "empty": "", "true": true, "false": false,
		"int": -42, "int8": int8(-8), "int16": int16(1600), "int32": int32(-1 << 31), "int64": int64(1 << 62),
		"uint": uint(42), "uint8": uint8(255), "uint16": uint16(65535), "uint32": uint32(1 << 31), "uint64": uint64(1<<64 - 1),
		"float32": float32(1.5), "float64": math.Pi,
		"time":    time.Date(2026, 11, 22, 10, 4, 5, 6, time.FixedZone("CET", 3600)),
		"bytes":   []byte{0, 1, 255},
		"strings": []string{"admin", "", "dev"},
		"_flash":  []any{"saved!", 3},
		"profile": map[string]any{"name": "ada", "tags": []string{"x"}, "nested": map[string]any{"deep": true}},
	}
}

func TestCompactCodecRoundTrip(t *testing.T) {
	want := compactSample()
	data, err := compactCodec{}.Encode(want)
	if err != nil || data[0] != compactForm {
		t.Fatalf("Encode: form %q, %v; want the compact form", data[:1], err)
	}
	got, err := compactCodec{}.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if tv, ok := v.(time.Time); ok {
			if g, ok := got[k].(time.Time); !ok || !g.Equal(tv) {
				t.Errorf("%s: got %#v, want %#v", k, got[k], v)
			}
			continue
		}
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s: got %#v (%T), want %#v (%T)", k, got[k], got[k], v, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d values, want %d", len(got), len(want))
	}
	// Empty slices come back nil, as gob gives them.
	got, err = compactCodec{}.Decode(mustEncode(t, compactCodec{}, map[any]any{"b": []byte{}, "s": []string{}, "l": []any{}}))
	if err != nil || got["b"] != nil && len(got["b"].([]byte)) != 0 {
		t.Fatalf("empty slices: %#v, %v", got, err)
	}
}

func mustEncode(t *testing.T, c Codec, values map[any]any) []byte {
	t.Helper()
	data, err := c.Encode(values)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCompactCodecKeepsZoneOffsets: a time comes back at its instant and
// with its zone's offset, seconds and all, west of UTC too (New York's
// local mean time was 4:56:02 behind), where time.UnmarshalBinary alone
// gives 256 s more.
func TestCompactCodecKeepsZoneOffsets(t *testing.T) {
	at := time.Date(1850, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, offset := range []int{-(4*3600 + 56*60 + 2), -(5*3600 + 30), -5 * 3600, 3600 + 30, 0} {
		want := at.In(time.FixedZone("", offset))
		got, err := compactCodec{}.Decode(mustEncodeT(t, map[any]any{"t": want}))
		g, _ := got["t"].(time.Time)
		if _, off := g.Zone(); err != nil || !g.Equal(want) || off != offset {
			t.Errorf("offset %d s: decoded %v (offset %d s), %v; want %v", offset, g, off, err, want)
		}
	}
}

// TestCompactCodecIsDeterministic checks that equal values give equal
// bytes, whatever the maps' iteration order: the middleware's change check
// compares encodings.
func TestCompactCodecIsDeterministic(t *testing.T) {
	first := mustEncode(t, compactCodec{}, compactSample())
	for range 20 {
		if again := mustEncode(t, compactCodec{}, compactSample()); !bytes.Equal(again, first) {
			t.Fatal("the same values encoded to different bytes")
		}
	}
}

// TestCanonical checks which encodings the middleware's change check
// compares as bytes alone: the default codec's compact form only.
func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		name   string
		codec  Codec
		values map[any]any
		want   bool
	}{
		{"compact form", compactCodec{}, compactSample(), true},
		{"empty", compactCodec{}, map[any]any{}, true},
		{"gob form (an int key)", compactCodec{}, map[any]any{42: "answer"}, false},
		{"gob form (a struct)", compactCodec{}, map[any]any{"p": codecProfile{ID: 7}}, false},
		{"JSON", JSONCodec{}, map[any]any{"k": "v"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := canonical(tc.codec, mustEncode(t, tc.codec, tc.values)); got != tc.want {
				t.Fatalf("canonical = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCompactCodecFallsBackToGob checks that values without a compact form
// (a registered struct, a non-string key) still round-trip, through gob.
func TestCompactCodecFallsBackToGob(t *testing.T) {
	for name, values := range map[string]map[any]any{
		"struct":         {"profile": codecProfile{ID: 7, Name: "ada"}, "n": 1},
		"struct in list": {"_flash": []any{codecProfile{ID: 1}}},
		"int key":        {42: "answer"},
		"map[string]int": {"m": map[string]int{"a": 1}},
	} {
		t.Run(name, func(t *testing.T) {
			data := mustEncode(t, compactCodec{}, values)
			if data[0] != gobForm {
				t.Fatalf("form %q, want gob", data[:1])
			}
			got, err := compactCodec{}.Decode(data)
			if err != nil || !reflect.DeepEqual(got, values) {
				t.Fatalf("got %#v, %v; want %#v", got, err, values)
			}
		})
	}
	if _, err := (compactCodec{}).Encode(map[any]any{"f": func() {}}); err == nil {
		t.Fatal("a func value encoded")
	}
}

// TestCompactCodecRejectsMalformedData checks that truncated or hostile
// bytes give an error, quickly and without allocating beyond their size.
func TestCompactCodecRejectsMalformedData(t *testing.T) {
	valid := mustEncode(t, compactCodec{}, compactSample())
	cases := map[string][]byte{
		"empty":          nil,
		"unknown form":   {'X'},
		"huge count":     {compactForm, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge string":    {compactForm, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unknown tag":    {compactForm, 1, 1, 'k', 99},
		"int8 overflow":  {compactForm, 1, 1, 'k', tagInt + 1, 0x80, 0x02},
		"deep nesting":   append(append([]byte{compactForm, 1, 1, 'k'}, bytes.Repeat([]byte{tagList, 1}, 100)...), tagNil),
		"trailing bytes": append(bytes.Clone(valid), 0),
		"a padded count": {compactForm, 0x81, 0x00, 1, 'k', tagTrue},
		"a padded int":   {compactForm, 1, 1, 'k', tagInt, 0x80, 0x00},
		// A zone offset of -90 s: UnmarshalBinary takes it, MarshalBinary cannot write it back.
		"a time with no binary form": {compactForm, 1, 1, 'k', tagTime, 16, 2, 0, 0, 0, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0x1e},
	}
	for i := 1; i < len(valid); i += len(valid) / 7 {
		cases[fmt.Sprintf("truncated at %d", i)] = valid[:i]
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if v, err := (compactCodec{}).Decode(data); err == nil {
				t.Fatalf("decoded %#v", v)
			}
		})
	}
}

// FuzzCompactCodec feeds the compact codec's decoder arbitrary bytes in its
// compact form (the gob form is gob's, fuzzed through FuzzGobFallback): it must
// never panic or allocate beyond the input, and what it decodes must
// encode, and decode again to the same values.
func FuzzCompactCodec(f *testing.F) {
	f.Add(mustEncodeF(f, compactSample())[1:])
	f.Add(mustEncodeF(f, map[any]any{})[1:])
	f.Add(mustEncodeF(f, map[any]any{"_flash": []any{"a", int64(1), nil}})[1:])
	f.Add([]byte{1, 1, 'k', tagList, 2, tagTrue, tagMap, 0})
	f.Add([]byte{1, 1, 'k', tagTime, 16, 2, 0, 0, 0, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0x1e})
	shared := compactCodec{&keyCache{}} // as a store's: keys of earlier inputs cached
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append([]byte{compactForm}, body...)
		values, err := shared.Decode(data)
		if err != nil {
			return
		}
		again, err := compactCodec{}.Encode(values)
		if err != nil {
			t.Fatalf("Encode of decoded %#v: %v", values, err)
		}
		back, err := compactCodec{}.Decode(again)
		if err != nil || !fuzzSameValues(values, back) {
			t.Fatalf("round trip: %#v, %v; want %#v", back, err, values)
		}
	})
}

// TestEncodesTo: the change check's walk over the stored encoding says
// "unchanged" for the values it was encoded from, and for nothing else.
func TestEncodesTo(t *testing.T) {
	stored := compactSample()
	data := mustEncodeT(t, stored)
	changed := func(change func(map[any]any)) map[any]any {
		v := compactSample()
		change(v)
		return v
	}
	tests := []struct {
		name   string
		data   []byte
		values map[any]any
		want   bool
	}{
		{"unchanged", data, compactSample(), true},
		{"a value changed", data, changed(func(v map[any]any) { v["int"] = -43 }), false},
		{"a value's type changed", data, changed(func(v map[any]any) { v["int"] = int64(-42) }), false},
		{"a nested value changed", data, changed(func(v map[any]any) { v["profile"].(map[string]any)["name"] = "bob" }), false},
		{"a key added", data, changed(func(v map[any]any) { v["new"] = 1 }), false},
		{"a key removed", data, changed(func(v map[any]any) { delete(v, "nil") }), false},
		{"a key renamed", data, changed(func(v map[any]any) { v["nil2"] = nil; delete(v, "nil") }), false},
		{"a key that is not a string", data, changed(func(v map[any]any) { v[1] = nil; delete(v, "nil") }), false},
		{"a value with no compact form", data, changed(func(v map[any]any) { v["int"] = time.Second }), false},
		{"none stored, none now", mustEncodeT(t, map[any]any{}), map[any]any{}, true},
		{"truncated", data[:len(data)-1], compactSample(), false},
		{"a byte more", append(bytes.Clone(data), 0), compactSample(), false},
		{"the gob form", []byte{gobForm}, compactSample(), false},
		{"empty", nil, map[any]any{}, false},
		{"keys out of order", []byte{compactForm, 2, 1, 'b', tagNil, 1, 'a', tagNil}, map[any]any{"a": nil, "b": nil}, false},
		{"a key twice", []byte{compactForm, 2, 1, 'a', tagNil, 1, 'a', tagNil}, map[any]any{"a": nil, "b": nil}, false},
		{"an empty key first", mustEncodeT(t, map[any]any{"": 1, "a": 2}), map[any]any{"": 1, "a": 2}, true},
		{"an empty key twice", []byte{compactForm, 2, 0, tagNil, 0, tagNil}, map[any]any{"": nil, "a": nil}, false},
		{"a long key", mustEncodeT(t, map[any]any{strings.Repeat("k", 100): 1}), map[any]any{strings.Repeat("k", 100): 1}, true},
		{"a padded count", []byte{compactForm, 0x81, 0x00, 1, 'k', tagTrue}, map[any]any{"k": true}, false},
		{"a padded key length", []byte{compactForm, 1, 0x81, 0x00, 'k', tagTrue}, map[any]any{"k": true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := encodesTo(nil, tc.data, tc.values); got != tc.want {
				t.Errorf("encodesTo = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzEncodesTo holds encodesTo to comparing Encode's bytes: for the values
// decoded from one input, against another input and against their encoding.
func FuzzEncodesTo(f *testing.F) {
	sample := mustEncodeF(f, compactSample())[1:]
	f.Add(sample, sample)
	f.Add(sample, sample[:len(sample)-1])
	f.Add([]byte{1, 1, 'k', tagTrue}, []byte{1, 1, 'k', tagFalse})
	f.Add([]byte{2, 1, 'a', tagNil, 1, 'b', tagNil}, []byte{2, 1, 'b', tagNil, 1, 'a', tagNil})
	f.Add([]byte{1, 1, 'k', tagTrue}, []byte{0x81, 0, 1, 'k', tagTrue})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		values, err := compactCodec{}.Decode(append([]byte{compactForm}, a...))
		if err != nil {
			return
		}
		enc, err := compactCodec{}.Encode(values)
		if err != nil {
			t.Fatalf("Encode of decoded %#v: %v", values, err)
		}
		for _, data := range [][]byte{append([]byte{compactForm}, b...), enc} {
			if got, want := encodesTo(nil, data, values), bytes.Equal(enc, data); got != want {
				t.Fatalf("encodesTo(%x, %#v) = %v; Encode gives %x", data, values, got, enc)
			}
		}
	})
}

// TestKeyCache: a store's decodes share the boxed keys, up to
// maxCachedKeys of at most maxCachedKeyLen bytes, and decode the same
// values with or without them, concurrently too.
func TestKeyCache(t *testing.T) {
	codec := compactCodec{&keyCache{}}
	sample := compactSample()
	data := mustEncodeT(t, sample)
	if _, err := codec.Decode(data); err != nil {
		t.Fatal(err)
	}
	plain := testing.AllocsPerRun(50, func() { _, _ = compactCodec{}.Decode(data) })
	shared := testing.AllocsPerRun(50, func() { _, _ = codec.Decode(data) })
	if want := plain - float64(len(sample)); shared > want {
		t.Errorf("a decode allocates %v with the keys cached, %v without; want at most %v", shared, plain, want)
	}
	long := strings.Repeat("k", maxCachedKeyLen+1)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range maxCachedKeys {
				values := map[any]any{fmt.Sprint("key", g, i): i, long: "v"}
				got, err := codec.Decode(mustEncodeT(t, values))
				if err != nil || !reflect.DeepEqual(got, values) {
					t.Errorf("Decode = %v, %v; want %v", got, err, values)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(codec.keys.load()); n != maxCachedKeys {
		t.Errorf("the cache holds %d keys, want %d", n, maxCachedKeys)
	}
	if _, ok := codec.keys.load()[long]; ok {
		t.Errorf("the cache holds a key of %d bytes", len(long))
	}
}

func mustEncodeT(t *testing.T, values map[any]any) []byte {
	data, err := compactCodec{}.Encode(values)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustEncodeF(f *testing.F, values map[any]any) []byte {
	data, err := compactCodec{}.Encode(values)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// heapAllocated returns the bytes fn allocates on the heap, the least of
// three runs (a test's other goroutines may allocate meanwhile).
func heapAllocated(fn func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestCompactCodecDoesNotPresizeFromClaimedCounts checks that a count in
// the input, which costs its author a few bytes, does not size what the
// decoder allocates: only the elements it actually decodes do.
func TestCompactCodecDoesNotPresizeFromClaimedCounts(t *testing.T) {
	// Defect 10: the decoder made a map, list or []string of the claimed
	// count before decoding any element (41 MiB for a 1 MiB map of junk).
	const size = 1 << 20
	const limit = 2 << 20
	claim := func(prefix ...byte) []byte {
		// The count is as large as the bytes that follow allow (every
		// element takes one at least), and the junk stops the decoder at
		// the first element.
		n := uint64(size - len(prefix) - binary.MaxVarintLen32)
		data := binary.AppendUvarint(prefix, n)
		return append(data, bytes.Repeat([]byte{0xff}, size-len(data))...)
	}
	for name, data := range map[string][]byte{
		"map of the values": claim(compactForm),
		"map":               claim(compactForm, 1, 1, 'k', tagMap),
		"list":              claim(compactForm, 1, 1, 'k', tagList),
		"[]string":          claim(compactForm, 1, 1, 'k', tagStrings),
	} {
		t.Run(name, func(t *testing.T) {
			if len(data) != size {
				t.Fatalf("%d bytes of input, want %d", len(data), size)
			}
			var err error
			n := heapAllocated(func() { _, err = compactCodec{}.Decode(data) })
			t.Logf("%d bytes allocated", n)
			if err == nil {
				t.Fatal("junk decoded")
			}
			if n > limit {
				t.Fatalf("Decode of %d bytes claiming ~%d elements allocated %d bytes, want at most %d", size, size, n, limit)
			}
		})
	}
}

// TestGobFormHoldsTheCompactTypes: a session that goes to the gob form
// (one value has no compact form) keeps its times, maps and lists, which
// the application never registered with gob: the store does.
func TestGobFormHoldsTheCompactTypes(t *testing.T) {
	values := map[any]any{
		"profile": codecProfile{ID: 7, Name: "ada"},
		"loginAt": time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC),
		"prefs":   map[string]any{"theme": "dark", "seen": []any{"a", int64(2)}},
		"flashes": []any{"welcome"},
	}
	data, err := (compactCodec{}).Encode(values)
	if err != nil || data[0] != gobForm {
		t.Fatalf("Encode: %v (form %q), want the gob form", err, data[:1])
	}
	got, err := (compactCodec{}).Decode(data)
	if err != nil || !reflect.DeepEqual(got, values) {
		t.Fatalf("Decode = %v, %v; want %v", got, err, values)
	}
}

// TestGobNamesOfTheApplicationStand: an application that registered
// time.Time under a name of its own (gob.Register(&time.Time{}) names it
// "*time.Time") starts, and its sessions in the gob form round-trip: the
// store registers its types only when the gob form needs them, and leaves
// a name given before alone. It runs in a process of its own: gob's names
// are the process's.
func TestGobNamesOfTheApplicationStand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperGobNames$")
	cmd.Env = append(os.Environ(), "MONGOSTORE_GOB_NAMES=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "round trip") {
		t.Fatalf("the process: %v\n%s", err, out)
	}
}

// TestHelperGobNames is the process of TestGobNamesOfTheApplicationStand;
// without MONGOSTORE_GOB_NAMES it does nothing.
func TestHelperGobNames(t *testing.T) {
	if os.Getenv("MONGOSTORE_GOB_NAMES") == "" {
		return
	}
	gob.Register(&time.Time{}) // as an application's init would
	values := map[any]any{"profile": codecProfile{ID: 1}, "at": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	data, err := (compactCodec{}).Encode(values)
	if err != nil {
		t.Fatal(err)
	}
	// gob gives back the type the application registered: a *time.Time.
	if got, err := (compactCodec{}).Decode(data); err != nil || fmt.Sprint(got) != fmt.Sprint(values) {
		t.Fatalf("Decode = %v, %v; want %v", got, err, values)
	}
	fmt.Println("round trip")
}
