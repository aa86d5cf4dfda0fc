package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestPredict checks what check says NewStore would do, for the indexes
// and the server's answers to the trials.
func TestPredict(t *testing.T) {
	hour, zero := int64(3600), int64(0)
	plain := setup.Index{Name: "expiresAt_1", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true, Plain: true}
	other := setup.Index{Name: "exp", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true}
	ttlHour := setup.Index{Name: "expiresAt_1", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true, TTL: &hour}
	ttl := setup.Index{Name: "expiresAt_1", Fields: []string{"expiresAt"}, Ascending: true, Ordered: true, TTL: &zero}
	owner := setup.Index{Name: "owner_1"}
	yes, refused, answered := probe{answer: setup.Accepted}, probe{answer: setup.Refused, err: errTest}, probe{answer: setup.Rejected, err: errTest}
	documentDB := probes{ttl: yes, seconds: yes, toTTL: answered} // as MongoDB before 5.1
	mongoDB := probes{ttl: yes, seconds: yes, toTTL: yes}
	noTTL := probes{ttl: refused, toTTL: refused}
	tests := []struct {
		name          string
		indexes       []setup.Index
		probes        probes
		verdict, fail string
	}{
		{"new, TTL", nil, documentDB, "TTL: NewStore creates expiresAt_1", ""},
		{"new, no TTL", nil, noTTL, "GC:", ""},
		{"new, odd answer", nil, probes{ttl: answered, toTTL: answered}, "NewStore would fail", "NewStore would fail"},
		{"TTL already", []setup.Index{ttl, owner}, documentDB, "TTL: expiresAt_1 is already", ""},
		{"collMod", []setup.Index{plain, owner}, mongoDB, "TTL: NewStore turns expiresAt_1 into", ""},
		{"no collMod command", []setup.Index{other}, noTTL, "GC:", ""},
		{"own plain, collMod refused", []setup.Index{plain}, documentDB, "TTL: NewStore drops its own plain index", ""},
		{"own plain, no TTL", []setup.Index{plain}, probes{ttl: refused, toTTL: answered}, "GC:", ""},
		{"other plain, collMod refused", []setup.Index{other}, documentDB, "NewStore would fail (ErrInvalidConfig): index \"exp\"", "dropIndex(\"exp\")"},
		{"TTL of an hour", []setup.Index{ttlHour}, documentDB, "TTL: NewStore changes the expireAfterSeconds of expiresAt_1 from 3600 to 0", ""},
		{"TTL of an hour, collMod refused", []setup.Index{ttlHour}, probes{ttl: yes, seconds: answered, toTTL: answered},
			"NewStore would fail (ErrInvalidConfig): index \"expiresAt_1\" on expiresAt has expireAfterSeconds 3600", "would fail"},
		{"collMod not tried", []setup.Index{plain}, probes{ttl: yes}, "unknown: collMod could not be tried", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verdict, fails := predict("sessions", tt.indexes, tt.probes, false)
			if !strings.HasPrefix(verdict[0], tt.verdict) || (tt.fail == "") != (fails == "") || !strings.Contains(fails, tt.fail) {
				t.Errorf("predict = %q, %q; want %q…, failing with %q", verdict, fails, tt.verdict, tt.fail)
			}
		})
	}
	// An owner_1 without options is the application's, which serves the
	// lists, but on FerretDB v1, which leaves sparse out of format 1's.
	spec, err := bson.Marshal(bson.D{{Key: "key", Value: bson.D{{Key: "owner", Value: 1}}}, {Key: "name", Value: "owner_1"}})
	if err != nil {
		t.Fatal(err)
	}
	appOwner := setup.ParseIndex(spec)
	for _, v1 := range []bool{false, true} {
		verdict, _ := predict("sessions", []setup.Index{appOwner}, documentDB, v1)
		if creates := strings.Contains(strings.Join(verdict, "\n"), "creates owner_present"); creates != v1 {
			t.Errorf("on FerretDB v1 %v: predict = %q; want owner_present created: %v", v1, verdict, v1)
		}
	}
	// The store drops its own plain index, then the server refuses the TTL
	// index: NewStore creates the plain index again, for the GC's sweeps.
	verdict, _ := predict("sessions", []setup.Index{plain}, probes{ttl: refused, toTTL: answered}, false)
	if len(verdict) < 2 || !strings.Contains(verdict[1], "creates expiresAt_1 again, for the sweeps") {
		t.Errorf("predict = %q, want the plain index created again", verdict)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("refused")

func TestFormats(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1000179: "1,000,179", -12345: "-12,345", -123: "-123", -123456: "-123,456"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{312: "312 B", 4200: "4.1 KiB", 3 << 20: "3.0 MiB"} {
		if got := bytesize(n); got != want {
			t.Errorf("bytesize(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{42 * time.Second: "42s", 312 * time.Second: "5m12s", 3*time.Hour + 4*time.Minute: "3h04m", 53 * time.Hour: "2d05h"} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	s := &sizeReport{}
	s.summarize([]int64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if s.P50 != 5 || s.P90 != 9 || s.P99 != 10 || s.Max != 10 || s.Mean != 5 || s.Count != 10 {
		t.Errorf("summarizeSizes = %+v", s)
	}
	zero := int64(0)
	if got := describeIndex(setup.Index{Key: "{expiresAt: 1}", TTL: &zero, Sparse: true}); got != "{expiresAt: 1}, TTL expireAfterSeconds 0, sparse" {
		t.Errorf("describeIndex = %q", got)
	}
	if got := printable("Firefox on Linux"); got != "Firefox on Linux" {
		t.Errorf("printable = %q", got)
	}
	if got := printable("a\x1b[2Jb"); got != `"a\x1b[2Jb"` {
		t.Errorf("printable = %q", got)
	}
	if got := shellQuote("alice@example.com"); got != "alice@example.com" {
		t.Errorf("shellQuote = %q", got)
	}
	if got := shellQuote("it's me"); got != `'it'\''s me'` {
		t.Errorf("shellQuote = %q", got)
	}
}

func TestParseKeys(t *testing.T) {
	k1, k2 := strings.Repeat("11", 32), strings.Repeat("22", 40)
	b1 := strings.Repeat("33", 32)
	pairs, err := parseKeys(k1+", "+k2, b1)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 4 || len(pairs[0]) != 32 || len(pairs[1]) != 32 || len(pairs[2]) != 40 || pairs[3] != nil {
		t.Errorf("pairs of lengths %d %d %d %d, want 32 32 40 0", len(pairs[0]), len(pairs[1]), len(pairs[2]), len(pairs[3]))
	}
	if _, err := parseKeys(k1, b1+","+b1); err == nil || !strings.Contains(err.Error(), "2 keys for 1") {
		t.Errorf("two block keys for one hash key: %v", err)
	}
}
