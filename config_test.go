package mongostore

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"
)

func TestNewStoreRejectsInvalidConfig(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	tests := []struct {
		name string
		cfg  Config
		keys [][]byte
	}{
		{"no keys", Config{}, nil},
		{"empty hash key", Config{}, [][]byte{{}}},
		{"short hash key", Config{}, [][]byte{[]byte("too short")}},
		{"block key of 10 bytes", Config{}, [][]byte{testHashKey, make([]byte, 10)}},
		{"bad second pair", Config{}, [][]byte{testHashKey, nil, []byte("short")}},
		{"unknown expiry mode", Config{Expiry: ExpiryMode(42)}, [][]byte{testHashKey}},
		{"GC interval too short", Config{GCInterval: time.Millisecond}, [][]byte{testHashKey}},
		{"negative timeout", Config{Timeout: -1}, [][]byte{testHashKey}},
		{"idle timeout under a second", Config{IdleTimeout: time.Millisecond}, [][]byte{testHashKey}},
		{"absolute timeout under a second", Config{AbsoluteTimeout: time.Millisecond}, [][]byte{testHashKey}},
		{"negative max size", Config{MaxSize: -1}, [][]byte{testHashKey}},
		{"max size over 15 MiB", Config{MaxSize: 16 << 20}, [][]byte{testHashKey}},
		{"negative idle timeout", Config{IdleTimeout: -time.Hour}, [][]byte{testHashKey}},
		{"timeout under a millisecond", Config{Timeout: time.Microsecond}, [][]byte{testHashKey}},
		{"negative per-owner limit", Config{MaxSessionsPerOwner: -3}, [][]byte{testHashKey}},
		{"per-owner limit beyond one listing", Config{MaxSessionsPerOwner: maxOwned + 1}, [][]byte{testHashKey}},
		{"lock wait under a millisecond", Config{LockWait: time.Microsecond}, [][]byte{testHashKey}},
		{"negative lock lease", Config{LockLease: -time.Second}, [][]byte{testHashKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = testLogger(&syncBuffer{})
			s, err := NewStore(context.Background(), coll, tt.cfg, tt.keys...)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewStore error = %v, want ErrInvalidConfig", err)
			}
			// One wording for every field: "Config.Field is value: want range".
			if msg := err.Error(); len(tt.keys) == 1 && string(tt.keys[0]) == string(testHashKey) && !regexp.MustCompile(`Config\.\w+ is .+: want `).MatchString(msg) {
				t.Errorf("error %q does not say Config.Field is value: want range", msg)
			}
			if s != nil {
				t.Fatal("NewStore returned a store with an error")
			}
		})
	}
	t.Run("nil collection", func(t *testing.T) {
		if _, err := NewStore(context.Background(), nil, Config{}, testHashKey); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("error = %v, want ErrInvalidConfig", err)
		}
	})
	t.Run("a per-owner limit of one listing", func(t *testing.T) {
		s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: maxOwned}, testHashKey)
		if err != nil {
			t.Fatalf("NewStore with MaxSessionsPerOwner %d: %v", maxOwned, err)
		}
		s.Close()
	})
	t.Run("valid pairs with and without block keys", func(t *testing.T) {
		for _, keys := range [][][]byte{
			{testHashKey},
			{testHashKey, nil},
			{testHashKey, make([]byte, 16)},
			{testHashKey, make([]byte, 24), otherHashKey, make([]byte, 32)},
		} {
			s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, keys...)
			if err != nil {
				t.Fatalf("NewStore with %d keys: %v", len(keys), err)
			}
			s.Close()
		}
	})
}

func TestExpiryModeString(t *testing.T) {
	for mode, want := range map[ExpiryMode]string{
		ExpiryAuto: "auto", ExpiryTTL: "ttl", ExpiryGC: "gc", ExpiryNone: "none", -1: "ExpiryMode(-1)", 4: "ExpiryMode(4)",
	} {
		if got := mode.String(); got != want {
			t.Errorf("ExpiryMode(%d).String() = %q, want %q", int(mode), got, want)
		}
	}
}
