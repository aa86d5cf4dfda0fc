package mongostore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

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
