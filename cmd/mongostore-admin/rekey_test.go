package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRekey rotates the fixture's key: a dry run counts and changes
// nothing, the rekey re-seals the live sessions (never the expired ones,
// never deleting), a second run finds nothing to do, and the new key alone
// then loads and lists every session; stats shows what depends on each key.
func TestRekey(t *testing.T) {
	f := newFixture(t)
	newKey := strings.Repeat("9a", 32)
	env := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": newKey + "," + testKey}
	before, _ := f.coll.CountDocuments(context.Background(), bson.D{})

	r := runCmd(t, env, "rekey", "-dry-run")
	mustContain(t, "stdout", r.stdout, "5 live sessions: 5 to re-seal under the first key pair (0 encrypted, 0 decrypted), 0 opened by none",
		"key pair 1: 0, key pair 2: 5")
	if r = runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": "zz"}, "stats"); r.code != 2 {
		t.Fatalf("stats with a SESSION_KEY not in hex: exit %d, stderr %q; want 2, a usage error", r.code, r.stderr)
	}
	r = runCmd(t, env, "stats")
	mustContain(t, "stdout", r.stdout, "keys        key pair 1: 0, key pair 2: 5 (of 5 live sessions; 0 opened by none, 0 with values this command cannot decode)")
	r = runCmd(t, env, "rekey", "-offline")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, "5 live sessions: 5 re-sealed under the first key pair")
	mustContain(t, "stderr", r.stderr, "rekey: 5 sessions read, 5 re-sealed, 0 unverified")
	r = runCmd(t, env, "rekey", "-offline")
	mustContain(t, "stdout", r.stdout, "5 live sessions: 0 re-sealed", "key pair 1: 5, key pair 2: 0")
	if after, _ := f.coll.CountDocuments(context.Background(), bson.D{}); after != before {
		t.Fatalf("%d documents after rekey, %d before: it must never delete", after, before)
	}

	// The cookies were signed with the old key (they verify until their
	// sessions end); the documents need the new key alone.
	newFirst := newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{}, bytes.Repeat([]byte{0x9a}, 32), nil, bytes.Repeat([]byte{0x6b}, 32), nil)
	for i, c := range append(f.alice, f.bob) {
		if !loads(t, newFirst, c) {
			t.Errorf("session %d does not load", i)
		}
	}
	rotated := newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{}, bytes.Repeat([]byte{0x9a}, 32))
	if list, err := rotated.ListSessions(context.Background(), "alice", nil); err != nil || len(list) != 2 {
		t.Errorf("the new key alone lists %d of alice's sessions (%v), want 2", len(list), err)
	}
	// The old key alone now reads nothing: rekey refuses to start with it.
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}, "rekey")
	if r.code != 1 || !strings.Contains(r.stderr, "do not match") {
		t.Fatalf("rekey with a key that reads nothing: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRekeyAddsEncryption turns encryption on: with the block key first
// and a plain pair after it, rekey encrypts every stored session.
func TestRekeyAddsEncryption(t *testing.T) {
	f := newFixture(t)
	block := strings.Repeat("3c", 32)
	env := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey + "," + testKey, "SESSION_BLOCK_KEY": block + ","}
	r := runCmd(t, env, "rekey", "-offline")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, "5 live sessions: 5 re-sealed under the first key pair (5 encrypted, 0 decrypted)")

	// The block key put second by mistake would decrypt them all: refused
	// without -decrypt, nothing changed.
	env["SESSION_KEY"], env["SESSION_BLOCK_KEY"] = testKey+","+testKey, ","+block
	r = runCmd(t, env, "rekey", "-offline")
	if r.code == 0 || !strings.Contains(r.stderr, "no block key") || !strings.Contains(r.stderr, "-decrypt") || r.stdout != "" {
		t.Fatalf("rekey that would decrypt: exit %d, stdout %q, stderr %q; want a refusal naming -decrypt, and no counts", r.code, r.stdout, r.stderr)
	}
	live := bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: time.Now()}}}}
	cur, err := f.coll.Find(context.Background(), live)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for ; cur.Next(context.Background()); n++ {
		if _, data, _ := cur.Current.Lookup("data").BinaryOK(); len(data) == 0 || data[0] != 1 {
			t.Fatalf("a live session left plain: envelope %x", data[:min(len(data), 1)])
		}
	}
	if n != 5 {
		t.Fatalf("%d live sessions, want 5", n)
	}
}

// TestSessionsTheCommandCannotDecode: sessions whose values the command's
// codec cannot decode (an application's own types; here, JSONCodec's) are
// counted apart by rekey, which then fails, and still ended by end.
func TestSessionsTheCommandCannotDecode(t *testing.T) {
	f := newFixture(t)
	other := newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone, Codec: mongostore.JSONCodec{}}, time.Time{})
	login(t, other, "carol", "Firefox on Linux")
	login(t, other, "carol", "Safari on iPhone")
	env := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": strings.Repeat("9a", 32) + "," + testKey}
	r := runCmd(t, env, "rekey", "-dry-run")
	mustContain(t, "stdout", r.stdout, "7 live sessions: 5 to re-seal", "0 opened by none of the keys, 2 with values this command cannot decode")
	if r.code != 1 || !strings.Contains(r.stderr, "2 sessions hold values of types this command cannot decode") {
		t.Fatalf("rekey -dry-run: exit %d, stderr %q; want 1, and the 2 sessions it cannot decode", r.code, r.stderr)
	}
	carol := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}
	r = runCmd(t, carol, "sessions", "-owner", "carol")
	// A heading, a blank line, a header, two sessions; the store's word of
	// the two it listed undecoded, and no warning of keys.
	if r.code != 0 || strings.Count(r.stdout, "\n") != 5 || !strings.Contains(r.stderr, "listed by their owner digest") || strings.Contains(r.stderr, "warning") {
		t.Fatalf("sessions -owner carol: exit %d, stdout %q, stderr %q; want her 2 sessions listed, no warning of keys", r.code, r.stdout, r.stderr)
	}
	r = runCmd(t, carol, "end", "-owner", "carol")
	if r.code != 0 || !strings.Contains(r.stdout, `ended every session of "carol" that these keys find: 2 sessions`) {
		t.Fatalf("end -owner carol: exit %d, stdout %q, stderr %q; want both ended", r.code, r.stdout, r.stderr)
	}
}

// TestSessionsUnderAKeyNotGiven: with sessions sampled that the keys given
// do not open, end ends what it can find, warns that those are left, and
// exits 1: the user's sessions under a hash key not given cannot even be
// found.
func TestSessionsUnderAKeyNotGiven(t *testing.T) {
	f := newFixture(t)
	login(t, newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{}, bytes.Repeat([]byte{0x9a}, 32)), "alice", "Old phone")
	r := runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}, "end", "-owner", "alice")
	if r.code != 1 || !strings.Contains(r.stderr, "warning: 1 of the 6 sessions sampled from") || !strings.Contains(r.stdout, "2 sessions") ||
		!strings.Contains(r.stderr, "the user's, if any, were neither listed nor ended") {
		t.Fatalf("end -owner alice: exit %d, stdout %q, stderr %q; want her 2 sessions under the key given ended, a warning, and exit 1", r.code, r.stdout, r.stderr)
	}
}

// TestSessionsOfBeforeARotation checks that the warning of sessions under
// a key not given comes even when the latest saved sessions (a sample's
// first ten) are all under the key given: a rotation's older sessions
// expire first.
func TestSessionsOfBeforeARotation(t *testing.T) {
	f := newFixture(t)
	old := newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{}, bytes.Repeat([]byte{0x9a}, 32))
	old.MaxAge(3600)
	for range 3 {
		login(t, old, "alice", "Old phone")
	}
	for range 12 {
		login(t, f.store, "carol", "Laptop")
	}
	r := runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}, "end", "-owner", "alice")
	if r.code != 1 || !strings.Contains(r.stderr, "do not open with these keys") {
		t.Fatalf("end -owner alice: exit %d, stderr %q; want a warning of her sessions under a key not given, and exit 1", r.code, r.stderr)
	}
}
