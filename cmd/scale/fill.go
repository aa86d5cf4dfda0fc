package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
)

const (
	cookieName = "scale-session"
	requestURL = "http://scale.invalid/"

	fillBatch      = 1000 // documents per InsertMany
	maxFillWorkers = 4    // concurrent InsertMany commands
	maxTemplates   = 64   // real documents the filler copies its shape from
	progressEvery  = 10 * time.Second
)

// realSession is a session created through the store.
type realSession struct {
	cookie    *http.Cookie
	uid       string // the value of "uid", checked on every load
	owner     string // its owner (mongostore.SetOwner): sessionsPerOwner sessions each
	expiresAt time.Time
}

// sessionsPerOwner is how many real sessions each owner has.
const sessionsPerOwner = 5

var devices = []string{"Firefox on Linux", "Safari on iPhone", "Chrome on Android", "Edge on Windows", "Safari on Mac"}

var firstNames = []string{"Alice", "Bob", "Chloé", "Dmitri", "Eve", "Fatima", "Grace", "Hiroshi", "Ines", "Jamal"}
var lastNames = []string{"Martin", "Okafor", "Nguyen", "Schmidt", "García", "Kowalski", "Rossi", "Tanaka"}

// createRealSessions creates count sessions through the store, as a login
// handler would: New on a request without cookie, a few values, Save.
func createRealSessions(ctx context.Context, store *mongostore.Store, count, workers int) ([]realSession, error) {
	sessions := make([]realSession, count)
	var next atomic.Int64
	err := parallel(ctx, min(workers, count), func(ctx context.Context) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= count || ctx.Err() != nil {
				return nil
			}
			s, err := createRealSession(ctx, store, i)
			if err != nil {
				return fmt.Errorf("real session %d: %w", i, err)
			}
			sessions[i] = s
		}
	})
	return sessions, err
}

func createRealSession(ctx context.Context, store *mongostore.Store, i int) (realSession, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, requestURL, nil)
	if err != nil {
		return realSession{}, err
	}
	session, err := store.New(r, cookieName)
	if err != nil {
		return realSession{}, fmt.Errorf("new: %w", err)
	}
	uid := fmt.Sprintf("user-%08d", i)
	session.Values["uid"] = uid
	session.Values["name"] = firstNames[i%len(firstNames)] + " " + lastNames[i%len(lastNames)]
	session.Values["roles"] = []string{"member", "editor"}[:1+i%2]
	session.Values["loginAt"] = time.Now().UTC()
	session.AddFlash("Welcome back!")
	owner := fmt.Sprintf("owner-%06d", i/sessionsPerOwner)
	mongostore.SetOwner(session, owner, devices[i%len(devices)])
	w := httptest.NewRecorder()
	if err := store.Save(r, w, session); err != nil {
		return realSession{}, fmt.Errorf("save: %w", err)
	}
	expiresAt, ok := store.ExpiresAt(session)
	if !ok {
		return realSession{}, errors.New("saved session has no expiry")
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == cookieName {
			return realSession{cookie: c, uid: uid, owner: owner, expiresAt: expiresAt}, nil
		}
	}
	return realSession{}, errors.New("save set no cookie")
}

// docShape is the shape of the store's documents, learnt from real ones.
type docShape struct {
	templates   [][]bson.RawElement
	expiryField string // the date field that holds the document's expiry
	meanSize    int    // mean BSON size of the templates, in bytes
}

// learnShape reads documents the store wrote and finds which of their date
// fields is the expiry: the one equal to Store.ExpiresAt of a real session.
func learnShape(ctx context.Context, coll *mongo.Collection, real []realSession) (docShape, error) {
	var shape docShape
	expiries := make(map[int64]bool, len(real))
	for _, s := range real {
		expiries[s.expiresAt.UnixMilli()] = true
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetLimit(maxTemplates))
	if err != nil {
		return shape, fmt.Errorf("read real documents: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		doc := bson.Raw(append([]byte(nil), cur.Current...))
		elems, err := doc.Elements()
		if err != nil {
			return shape, fmt.Errorf("read real documents: %w", err)
		}
		field := ""
		for _, e := range elems {
			if ms, ok := e.Value().DateTimeOK(); ok && expiries[ms] {
				if field != "" {
					return shape, fmt.Errorf("real document has two date fields equal to its expiry: %q and %q", field, e.Key())
				}
				field = e.Key()
			}
		}
		switch {
		case field == "":
			return shape, fmt.Errorf("no date field of a real document equals its session's expiry: %s", doc)
		case shape.expiryField != "" && field != shape.expiryField:
			return shape, fmt.Errorf("real documents keep their expiry in different fields: %q and %q", shape.expiryField, field)
		}
		shape.expiryField = field
		shape.templates = append(shape.templates, elems)
		shape.meanSize += len(doc)
	}
	if err := cur.Err(); err != nil {
		return shape, fmt.Errorf("read real documents: %w", err)
	}
	if len(shape.templates) == 0 {
		return shape, errors.New("the store wrote no documents")
	}
	shape.meanSize /= len(shape.templates)
	return shape, nil
}

// allIDs returns the _id of every document in coll.
func allIDs(ctx context.Context, coll *mongo.Collection) ([]any, error) {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read real document IDs: %w", err)
	}
	defer cur.Close(ctx)
	var ids []any
	for cur.Next(ctx) {
		var doc struct {
			ID any `bson:"_id"`
		}
		if err := cur.Decode(&doc); err != nil {
			return nil, fmt.Errorf("read real document IDs: %w", err)
		}
		ids = append(ids, doc.ID)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read real document IDs: %w", err)
	}
	return ids, nil
}

// fillPlan says what filler to insert.
type fillPlan struct {
	total    int           // filler documents
	expired  int           // of which expired
	liveFrom time.Duration // live filler expires between now+liveFrom
	liveTo   time.Duration // and now+liveTo
}

// fillResult describes the filler inserted.
type fillResult struct {
	live, expired int64
	meanSize      int       // mean BSON size of the filler, in bytes
	maxLiveExpiry time.Time // the latest expiry of a live filler document
}

// insertFiller bulk-inserts the filler: documents shaped like a random
// template, every binary and string field random (_id included, so a string
// _id stays a hex string of the same length), dates moved with the expiry.
// The expired documents are spread at random among the batches.
func insertFiller(ctx context.Context, coll *mongo.Collection, shape docShape, plan fillPlan, workers int, progress io.Writer) (fillResult, error) {
	var res fillResult
	if plan.total == 0 {
		return res, nil
	}
	batches := make(chan []any, 2)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The producer builds the batches; the workers insert them.
	var produced error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(batches)
		produced = produceFiller(ctx, shape, plan, &res, batches, progress)
		if produced != nil {
			cancel(produced)
		}
	})
	inserted := parallel(ctx, min(workers, maxFillWorkers), func(ctx context.Context) error {
		for batch := range batches {
			if _, err := coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false)); err != nil {
				cancel(err)
				for range batches { // let the producer finish
				}
				return fmt.Errorf("insert filler: %w", err)
			}
		}
		return nil
	})
	wg.Wait()
	switch {
	case produced != nil:
		return res, produced
	case inserted != nil:
		return res, inserted
	}
	return res, context.Cause(ctx)
}

// produceFiller sends the filler in batches on out.
func produceFiller(ctx context.Context, shape docShape, plan fillPlan, res *fillResult, out chan<- []any, progress io.Writer) error {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	now := time.Now()
	expiredLeft := plan.expired
	lastReport := now
	var size int
	batch := make([]any, 0, fillBatch)
	for i := range plan.total {
		// Selection sampling: exactly plan.expired documents are expired,
		// each position equally likely.
		var expiresAt time.Time
		if rng.IntN(plan.total-i) < expiredLeft {
			expiredLeft--
			expiresAt = now.Add(-time.Minute - randDuration(rng, 59*time.Minute))
			res.expired++
		} else {
			expiresAt = now.Add(plan.liveFrom + randDuration(rng, plan.liveTo-plan.liveFrom))
			res.live++
		}
		expiresAt = expiresAt.Truncate(time.Millisecond)
		doc, err := fillerDoc(rng, shape, expiresAt)
		if err != nil {
			return err
		}
		if expiresAt.After(now) {
			res.maxLiveExpiry = maxTime(res.maxLiveExpiry, expiresAt)
		}
		if i < fillBatch { // the first batch's mean size is enough
			raw, err := bson.Marshal(doc)
			if err != nil {
				return fmt.Errorf("filler document: %w", err)
			}
			size += len(raw)
		}
		batch = append(batch, doc)
		if len(batch) == fillBatch || i == plan.total-1 {
			select {
			case out <- batch:
			case <-ctx.Done():
				return nil // the cause is reported by the caller
			}
			batch = make([]any, 0, fillBatch)
		}
		if progress != nil && time.Since(lastReport) >= progressEvery {
			fmt.Fprintf(progress, "  fill: %d/%d filler documents\n", i+1, plan.total)
			lastReport = time.Now()
		}
	}
	res.meanSize = size / min(plan.total, fillBatch)
	return nil
}

// fillerDoc builds a filler document expiring at expiresAt and returns it
// with its _id.
func fillerDoc(rng *rand.Rand, shape docShape, expiresAt time.Time) (bson.D, error) {
	tmpl := shape.templates[rng.IntN(len(shape.templates))]
	var tmplExpiry time.Time
	for _, e := range tmpl {
		if e.Key() == shape.expiryField {
			tmplExpiry = e.Value().Time()
		}
	}
	doc := make(bson.D, 0, len(tmpl))
	hasID := false
	for _, e := range tmpl {
		v := e.Value()
		var nv any
		switch v.Type {
		case bson.TypeString:
			nv = randomHex(rng, len(v.StringValue()))
		case bson.TypeBinary:
			sub, data := v.Binary()
			nv = bson.Binary{Subtype: sub, Data: randomBytes(rng, len(data))}
		case bson.TypeDateTime:
			// Keep each date's distance to the expiry (createdAt and
			// updatedAt a session lifetime before it).
			nv = bson.NewDateTimeFromTime(expiresAt.Add(v.Time().Sub(tmplExpiry)))
		default:
			nv = v // copied as is
		}
		hasID = hasID || e.Key() == "_id"
		doc = append(doc, bson.E{Key: e.Key(), Value: nv})
	}
	if !hasID {
		return nil, errors.New("real documents have no _id")
	}
	return doc, nil
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n+7)
	for i := 0; i < n; i += 8 {
		u := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(u >> (8 * j))
		}
	}
	return b[:n]
}

// randDuration returns a random duration in [0, d).
func randDuration(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}

func randomHex(rng *rand.Rand, n int) string {
	return hex.EncodeToString(randomBytes(rng, (n+1)/2))[:n]
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// parallel runs f in n goroutines and waits for them. The first error
// cancels the others' context and is returned.
func parallel(ctx context.Context, n int, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range max(n, 1) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				once.Do(func() { first = err })
				cancel(err)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}
