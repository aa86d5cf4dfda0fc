package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// storedSessions inserts n sessions sealed by store, every third owned by
// owner, and returns their session IDs.
func storedSessions(t *testing.T, f *storeFixture, store *Store, n int, owner string) []string {
	t.Helper()
	var ids []string
	var docs []any
	for i := range n {
		values := map[any]any{"i": i}
		if i%3 == 0 {
			values[ownerKey] = owner
		}
		sv := newSaving(t, store, values, time.Now())
		id := sv.token
		d := store.document(sv)
		docs = append(docs, d.raw())
		ids = append(ids, id)
	}
	if _, err := f.coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return ids
}

// wantLoads checks that store loads the sessions ids with their values.
func wantLoads(t *testing.T, f *storeFixture, store *Store, ids []string) {
	t.Helper()
	for i, id := range ids {
		s, err := loadSession(t, &storeFixture{store: store, coll: f.coll}, cookieFor(t, store, id))
		if err != nil || s.IsNew || s.Values["i"] != i {
			t.Fatalf("session %d: %v, %v", i, s.Values, err)
		}
	}
}

// TestRekey re-seals a collection under a new key pair: a dry run counts
// and changes nothing, the run changes every session, a second run none,
// and a store with the new pair alone then loads and lists every session.
func TestRekey(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	ids := storedSessions(t, f, f.store, 1100, "ada")
	// One session sealed with a key the operator does not give: left alone.
	stranger := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, bytesOf(0x77))
	storedSessions(t, f, stranger, 1, "ada")
	rotated := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	dry, err := rotated.Rekey(context.Background(), RekeyOptions{DryRun: true, SingleProcess: true})
	want := RekeyCounts{Live: 1101, Changed: 1100, Unverified: 1, ByKey: []int64{0, 1100}}
	if err != nil || fmt.Sprint(dry) != fmt.Sprint(want) {
		t.Fatalf("dry run = %+v, %v; want %+v", dry, err, want)
	}
	var batches int
	got, err := rotated.Rekey(context.Background(), RekeyOptions{SingleProcess: true, Progress: func(RekeyCounts) { batches++ }})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) || batches != 3 {
		t.Fatalf("Rekey = %+v, %v after %d batches; want %+v after 3", got, err, batches, want)
	}
	again, err := rotated.Rekey(context.Background(), RekeyOptions{SingleProcess: true})
	want = RekeyCounts{Live: 1101, Unverified: 1, ByKey: []int64{1100, 0}}
	if err != nil || fmt.Sprint(again) != fmt.Sprint(want) {
		t.Fatalf("second run = %+v, %v; want %+v", again, err, want)
	}
	newOnly := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey)
	wantLoads(t, f, newOnly, ids[:20])
	if list, err := newOnly.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 367 {
		t.Fatalf("the new keys list %d of ada's sessions (%v), want 367", len(list), err)
	}
}

// TestRekeyResumes cuts a rekey after its first batch, and checks that a
// second run finishes it and changes only what the first did not.
func TestRekeyResumes(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	ids := storedSessions(t, f, f.store, 700, "ada")
	rotated := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	ctx, cancel := context.WithCancel(context.Background())
	first, err := rotated.Rekey(ctx, RekeyOptions{SingleProcess: true, Progress: func(RekeyCounts) { cancel() }})
	if !errors.Is(err, ErrDatabase) || first.Changed != rekeyBatch {
		t.Fatalf("cut run = %+v, %v; want %d changed and ErrDatabase", first, err, rekeyBatch)
	}
	second, err := rotated.Rekey(context.Background(), RekeyOptions{SingleProcess: true})
	if err != nil || second.Changed != 700-rekeyBatch || second.ByKey[0] != rekeyBatch {
		t.Fatalf("resumed run = %+v, %v; want the other %d changed", second, err, 700-rekeyBatch)
	}
	wantLoads(t, f, storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey), ids[:20])
}

// TestRekeyAddsEncryption turns encryption on without signing anybody out:
// a store with the new block key first and a plain pair after it reads the
// plain sessions, Rekey encrypts them, and a store with the block key alone
// (which refuses plain data) then loads them.
func TestRekeyAddsEncryption(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	ids := storedSessions(t, f, f.store, 30, "ada")
	turning := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey, testHashKey, nil)
	wantLoads(t, f, turning, ids)
	// The plain sessions are the old pair's: the new one alone refuses them.
	if got, err := turning.Rekey(context.Background(), RekeyOptions{DryRun: true}); err != nil || !slices.Equal(got.ByKey, []int64{0, 30}) {
		t.Fatalf("Rekey dry run = %+v, %v; want 30 for the old key pair", got, err)
	}
	got, err := turning.Rekey(context.Background(), RekeyOptions{SingleProcess: true})
	if err != nil || got.Changed != 30 || !slices.Equal(got.ByKey, []int64{0, 30}) {
		t.Fatalf("Rekey = %+v, %v; want 30 changed", got, err)
	}
	if got, err := turning.Rekey(context.Background(), RekeyOptions{DryRun: true}); err != nil || !slices.Equal(got.ByKey, []int64{30, 0}) {
		t.Fatalf("Rekey dry run after = %+v, %v; want 30 for the new key pair", got, err)
	}
	cur, err := f.coll.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for cur.Next(context.Background()) {
		if d, err := parseDocument(cur.Current); err != nil || d.data[0] != envelopeGCM {
			t.Fatalf("a session left plain: %v", err)
		}
	}
	wantLoads(t, f, storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey), ids)
}

// TestRekeyCountsWhatEachSessionNeeds: a session that no pair opens alone
// (its MAC the first pair's hash key, its plain data read by the second,
// without a block key) loads, is re-sealed, and counts for both pairs: the
// second cannot go before Rekey.
func TestRekeyCountsWhatEachSessionNeeds(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	ids := storedSessions(t, f, f.store, 3, "ada")
	mixed := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey, otherHashKey, nil)
	wantLoads(t, f, mixed, ids)
	if got, err := mixed.Rekey(context.Background(), RekeyOptions{DryRun: true}); err != nil || got.Unverified != 0 || !slices.Equal(got.ByKey, []int64{3, 3}) {
		t.Fatalf("Rekey dry run = %+v, %v; want each session counted for both pairs", got, err)
	}
	if got, err := mixed.Rekey(context.Background(), RekeyOptions{SingleProcess: true}); err != nil || got.Changed != 3 || got.Encrypted != 3 {
		t.Fatalf("Rekey = %+v, %v; want 3 re-sealed, encrypted", got, err)
	}
	if got, err := mixed.Rekey(context.Background(), RekeyOptions{DryRun: true}); err != nil || !slices.Equal(got.ByKey, []int64{3, 0}) {
		t.Fatalf("Rekey dry run after = %+v, %v; want 3 for the first pair alone", got, err)
	}
}

func bytesOf(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

// TestRekeyCommandsAreBounded checks that each of Rekey's commands is
// bounded by Config.Timeout, even under a context without a deadline: a
// server that stops answering cannot hold it, and a session's chain lock,
// for ever.
func TestRekeyCommandsAreBounded(t *testing.T) {
	for _, singleProcess := range []bool{true, false} { // without it, Rekey first asks whether writes are atomic
		t.Run(fmt.Sprintf("SingleProcess=%v", singleProcess), func(t *testing.T) {
			coll, proxy := proxiedCollection(t, options.Client())
			store := storeOn(t, coll, Config{Expiry: ExpiryNone, Timeout: 300 * time.Millisecond}, testHashKey)
			proxy.BlackHole(true)
			t.Cleanup(func() { proxy.BlackHole(false) })
			done := make(chan error, 1)
			go func() {
				_, err := store.Rekey(context.Background(), RekeyOptions{SingleProcess: singleProcess})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrDatabase) {
					t.Fatalf("Rekey on a server that does not answer: %v, want ErrDatabase", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Rekey still waits on a server that does not answer, 30s on")
			}
		})
	}
}
