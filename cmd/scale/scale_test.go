package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
)

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int{
		"10000":                {10000},
		"10000,100000,1000000": {10000, 100000, 1000000},
		" 10k, 1M ":            {10000, 1000000},
	} {
		got, err := parseSizes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "ten", "10,,20", "1k5", "200m"} {
		if got, err := parseSizes(in); err == nil {
			t.Errorf("parseSizes(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseFlags(t *testing.T) {
	s, err := parseFlags([]string{"-uri", "mongodb://h/", "-n", "10k", "-expiry", "gc", "-workers", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.uri != "mongodb://h/" || !slices.Equal(s.sizes, []int{10000}) || s.expiry != mongostore.ExpiryGC ||
		s.workers != 2 || s.loads != 2000 || s.timeout != 20*time.Minute || s.db != "mongostore_scale" {
		t.Errorf("parseFlags gave %+v", s)
	}
	for _, args := range [][]string{
		{"-uri", "mongodb://h/", "-expiry", "never"},
		{"-uri", "mongodb://h/", "-workers", "0"},
		{"-uri", "mongodb://h/", "extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Errorf("p50 = %d, want 50", p)
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Errorf("p99 = %d, want 99", p)
	}
	if p := percentile(d[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %d, want 1", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %d, want 0", p)
	}
}

// TestSmall runs the whole benchmark at a small size against the server in
// MONGODB_URI or, when it is empty, an embedded server that run starts.
func TestSmall(t *testing.T) {
	uri := os.Getenv("MONGODB_URI")
	s, err := parseFlags([]string{"-uri", uri, "-n", "2000", "-sessions", "50", "-loads", "100",
		"-workers", "2", "-rounds", "2", "-phase-timeout", "30s", "-timeout", "3m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s.collPrefix = "test_"
	var out bytes.Buffer
	err = run(context.Background(), s, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lost: 0 of 50 real sessions", "0 of 1750 live filler documents missing", "| 2000 |", "owners: 10 owners of 5 sessions each"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
