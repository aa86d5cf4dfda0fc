package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

var checkCommand = command{
	name:    "check",
	summary: "what the server supports, and what the store will do there",
	usage:   "[-db name] [-collection name]",
	help: `
Asks the server what it is (buildInfo, hello), tries on a scratch
collection, which it drops afterwards, whether it accepts a TTL index and
whether collMod turns a plain index into a TTL one, says what NewStore
with ExpiryAuto would do with the collection as it is, and compares the
read preference and write concern of MONGODB_URI with what the store
uses. Exits 1 if NewStore would fail there. Needs no SESSION_KEY.`,
	flags: func(fs *flag.FlagSet) body {
		return body{run: func(ctx context.Context, a *app, c *conn) error { return a.check(ctx, c) }}
	},
}

// scratchPrefix starts the name of check's scratch collections.
const scratchPrefix = "mongostore_admin_check_"

// probe is the server's answer to a trial on the scratch collection.
type probe struct {
	answer setup.Answer // NotAsked: not tried
	err    error        // the server's answer, unless Accepted
}

// result says how the probe went.
func (p probe) result() string {
	switch p.answer {
	case setup.NotAsked:
		return "not tried"
	case setup.Accepted:
		return "yes"
	}
	return "no: " + serverAnswer(p.err)
}

// probes are check's trials on the scratch collection.
type probes struct {
	ttl     probe // createIndexes of a TTL index on expiresAt
	toTTL   probe // collMod of a plain index into a TTL one
	seconds probe // collMod of a TTL index's expireAfterSeconds
}

func (a *app) check(ctx context.Context, c *conn) (err error) {
	r := report{a.stdout, 13}
	info, err := getServerInfo(ctx, c.coll.Database())
	if err != nil {
		return err
	}
	r.line("server", "%s at %s", info, c.server)
	indexes, err := a.checkCollection(ctx, c, r)
	if err != nil {
		return err
	}
	scratch, drop, err := a.scratch(ctx, c)
	if err != nil {
		return err
	}
	defer func() {
		if derr := drop(); derr != nil {
			fmt.Fprintf(a.stderr, "mongostore-admin check: %v\n", derr)
			if err == nil {
				err = problemError{"check left its scratch collection or database behind"}
			}
		}
	}()
	pr, err := runProbes(ctx, scratch)
	if err != nil {
		return err
	}
	pr.print(r)
	verdict, fails := predict(c.coll.Name(), indexes, pr)
	r.line("ExpiryAuto", "%s", verdict[0])
	for _, v := range verdict[1:] {
		r.more("%s", v)
	}
	a.checkConcerns(ctx, c, info, r)
	r.line("scratch", "%s.%s, dropped at the end", scratch.Database().Name(), scratch.Name())
	if fails != "" {
		return problemError{fails}
	}
	return nil
}

// checkCollection says what c's collection holds and returns its indexes.
func (a *app) checkCollection(ctx context.Context, c *conn, r report) ([]setup.Index, error) {
	names, err := c.coll.Database().ListCollectionNames(ctx, bson.D{{Key: "name", Value: c.coll.Name()}})
	if err != nil {
		return nil, fmt.Errorf("list collections of %s: %w", c.coll.Database().Name(), err)
	}
	if len(names) == 0 {
		r.line("collection", "%s does not exist yet: the application's first NewStore or session creates it", c.name())
		return nil, nil
	}
	n, err := c.coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return nil, fmt.Errorf("estimated document count: %w", err)
	}
	r.line("collection", "%s: %s documents (estimated)", c.name(), count(n))
	if _, err := a.sessionSample(ctx, c); err != nil {
		return nil, err
	}
	return listIndexes(ctx, c.coll)
}

// scratch returns a new scratch collection in c's database, and the
// function that drops it and, if check created the database, the database
// (MongoDB drops a database with its last collection; FerretDB keeps it).
func (a *app) scratch(ctx context.Context, c *conn) (*mongo.Collection, func() error, error) {
	db := c.coll.Database()
	existed, err := listed(ctx, db)
	if err != nil {
		existed = true // the database, if check creates it, is left behind
		fmt.Fprintf(a.stderr, "mongostore-admin check: %v: if %s does not exist, the scratch collection creates it, and check leaves it\n", err, db.Name())
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	scratch := db.Collection(scratchPrefix + hex.EncodeToString(suffix[:]))
	return scratch, func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := scratch.Drop(ctx); err != nil {
			return fmt.Errorf("could not drop the scratch collection %s.%s: %w; drop it by hand: db.getCollection(%q).drop()",
				db.Name(), scratch.Name(), err, scratch.Name())
		}
		if existed {
			return nil
		}
		if now, err := listed(ctx, db); err != nil || !now {
			return err
		}
		names, err := db.ListCollectionNames(ctx, bson.D{})
		if err != nil || len(names) > 0 { // created by someone else meanwhile
			return err
		}
		return db.Drop(ctx)
	}, nil
}

// listed reports whether the server lists the database db.
func listed(ctx context.Context, db *mongo.Database) (bool, error) {
	names, err := db.Client().ListDatabaseNames(ctx, bson.D{{Key: "name", Value: db.Name()}})
	if err != nil {
		return false, fmt.Errorf("list databases: %w", err)
	}
	return len(names) > 0, nil
}

// print shows the probes' results.
func (pr probes) print(r report) {
	switch pr.ttl.answer {
	case setup.Accepted:
		r.line("TTL indexes", "yes: createIndexes {expiresAt: 1} with expireAfterSeconds 0 succeeded on a scratch collection")
	case setup.Refused:
		r.line("TTL indexes", "no: %s", serverAnswer(pr.ttl.err))
		r.more("ExpiryAuto falls back to the GC goroutine; ExpiryTTL makes NewStore fail")
	default:
		r.line("TTL indexes", "unknown: %s", serverAnswer(pr.ttl.err))
		r.more("NewStore in ExpiryAuto or ExpiryTTL would fail with this answer (ErrDatabase)")
	}
	label := "collMod"
	if pr.seconds.answer != setup.NotAsked {
		r.line(label, "a TTL index's expireAfterSeconds (3600 to 0): %s", pr.seconds.result())
		label = ""
	}
	r.line(label, "a plain index to a TTL one: %s", pr.toTTL.result())
	switch pr.toTTL.answer {
	case setup.Accepted:
		r.more("NewStore fixes an index on expiresAt with other TTL settings, or none, in place")
	case setup.Refused:
		r.more("with an index on expiresAt that is not a TTL one, ExpiryAuto keeps it and falls back to the GC goroutine")
	case setup.Rejected:
		r.more("as MongoDB before 5.1: the store replaces its own plain index (expiresAt_1, from GC mode) by a TTL one,")
		r.more("and refuses to touch another: NewStore then fails, naming the dropIndex to run")
	}
}

// runProbes tries, on the empty collection scratch: a TTL index on
// expiresAt; collMod of a TTL index's expireAfterSeconds (3600 to 0); and
// collMod of a plain index into a TTL one. Network failures and timeouts
// are errors; the server's answers are results, read as the store reads
// them (setup.Read).
func runProbes(ctx context.Context, scratch *mongo.Collection) (probes, error) {
	var p probes
	create := func(ttl *int32) error {
		opts := options.Index()
		if ttl != nil {
			opts.SetExpireAfterSeconds(*ttl)
		}
		_, err := scratch.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: setup.FieldExpiresAt, Value: 1}}, Options: opts})
		return err
	}
	drop := func() error { return scratch.Indexes().DropOne(ctx, setup.ExpiresAtIndexName) }
	collMod := func() error {
		return scratch.Database().RunCommand(ctx, bson.D{{Key: "collMod", Value: scratch.Name()}, {Key: "index", Value: bson.D{
			{Key: "name", Value: setup.ExpiresAtIndexName}, {Key: "expireAfterSeconds", Value: int64(setup.TTLExpireAfterSeconds)}}}}).Err()
	}
	zero, hour := int32(setup.TTLExpireAfterSeconds), int32(3600)
	if err := p.ttl.try("create a TTL index", create(&zero), setup.TTLRefused); err != nil {
		return p, err
	}
	if p.ttl.answer == setup.Accepted {
		if err := errors.Join(drop(), create(&hour)); err != nil {
			return p, fmt.Errorf("replace the scratch TTL index by one of an hour: %w", err)
		}
		if err := errors.Join(p.seconds.try("collMod", collMod(), setup.Unsupported), drop()); err != nil {
			return p, err
		}
	}
	if err := create(nil); err != nil {
		if !setup.IsAnswer(err) {
			return p, fmt.Errorf("create a plain index on a scratch collection: %w", err)
		}
		return p, nil // collMod not tried
	}
	return p, p.toTTL.try("collMod", collMod(), setup.Unsupported)
}

// try records the server's answer err to what in p, refused saying which
// answers are refusals; an error that is no answer is returned.
func (p *probe) try(what string, err error, refused func(error) bool) error {
	var ok bool
	if p.answer, ok = setup.Read(err, refused); !ok {
		return fmt.Errorf("%s on a scratch collection: %w", what, err)
	}
	p.err = err
	return nil
}

// predict says what NewStore with ExpiryAuto (the default) would do with
// a collection that has indexes, on a server that answered the probes so:
// it follows setup.Decide, as NewStore does, with the probes' answers.
// fails is non-empty if NewStore would fail.
func predict(collection string, indexes []setup.Index, pr probes) (verdict []string, fails string) {
	idx := setup.FindExpiresAt(indexes)
	var a setup.Answers
	var steps []setup.Step
	for d := setup.Decide(idx, a); d.Next != setup.None; d = setup.Decide(idx, a) {
		switch steps = append(steps, d.Next); d.Next {
		case setup.CollMod:
			p := pr.toTTL // on a TTL index, collMod changes expireAfterSeconds
			if idx.TTL != nil && pr.seconds.answer != setup.NotAsked {
				p = pr.seconds
			}
			if p.answer == setup.NotAsked {
				return []string{"unknown: collMod could not be tried on a scratch collection"}, ""
			}
			a.CollMod = p.answer
		case setup.CreateTTL:
			a.CreateTTL = pr.ttl.answer
		case setup.DropPlain:
			a.Dropped = true
		case setup.CreatePlain:
			a.Restored = true
		}
	}
	verdict, fails = describePlan(collection, idx, steps, setup.Decide(idx, a).Outcome)
	if fails == "" && !setup.HasOwnerIndex(indexes) {
		verdict = append(verdict, "NewStore creates "+setup.OwnerIndexName+" (sparse) for the users' session lists")
	}
	return verdict, fails
}

// describePlan says what NewStore does with the index on expiresAt idx
// (nil: none) when it sends steps and the outcome is so.
func describePlan(collection string, idx *setup.Index, steps []setup.Step, outcome setup.Outcome) (verdict []string, fails string) {
	const gc = "GC: the GC goroutine deletes expired sessions every GCInterval (1 minute by default)"
	switch {
	case outcome == setup.Conflict:
		fails = "NewStore would fail (ErrInvalidConfig): " + setup.ConflictReason(collection, idx)
	case outcome == setup.Failed:
		fails = "NewStore would fail (ErrDatabase): the server answered the TTL index with an error the store does not take for 'not supported'"
	case outcome == setup.NoTTL && idx == nil:
		return []string{gc, "NewStore creates " + setup.ExpiresAtIndexName + ", a plain index, for the sweeps"}, ""
	case outcome == setup.NoTTL && slices.Contains(steps, setup.CreatePlain):
		return []string{gc, "NewStore drops its own plain index " + idx.Name + " to create a TTL index, which the server refuses, " +
			"and creates " + idx.Name + " again, for the sweeps"}, ""
	case outcome == setup.NoTTL:
		return []string{gc, "the server does not implement collMod: NewStore keeps " + idx.Name + " as it is, for the sweeps"}, ""
	case len(steps) == 0:
		return []string{"TTL: " + idx.Name + " is already a TTL index with expireAfterSeconds 0"}, ""
	case idx == nil:
		return []string{"TTL: NewStore creates " + setup.ExpiresAtIndexName + ", a TTL index with expireAfterSeconds 0"}, ""
	case slices.Contains(steps, setup.DropPlain):
		return []string{"TTL: NewStore drops its own plain index " + idx.Name + " (from GC mode) and creates the TTL index"}, ""
	case idx.TTL != nil:
		return []string{fmt.Sprintf("TTL: NewStore changes the expireAfterSeconds of %s from %d to 0 (collMod)", idx.Name, *idx.TTL)}, ""
	default:
		return []string{"TTL: NewStore turns " + idx.Name + " into a TTL index with expireAfterSeconds 0 (collMod)"}, ""
	}
	return []string{fails}, fails
}

// checkConcerns compares the read preference and write concern of the
// URI with what the store uses.
func (a *app) checkConcerns(ctx context.Context, c *conn, info serverInfo, r report) {
	rp := "primary (the driver's default: the URI sets none)"
	if p := c.opts.ReadPreference; p != nil {
		rp = p.Mode().String() + " (from the URI)"
		if p.Mode() != readpref.PrimaryMode {
			rp += ": the application's other reads may see stale data"
		}
	}
	r.line("read pref", "client default %s", rp)
	r.more("the store reads from the primary whatever the client's default: a request sees what the previous one wrote")

	if wc := c.opts.WriteConcern; wc != nil {
		r.line("write concern", "%s (from the URI); the store's writes use it", describeWC(wc))
		if !wc.Acknowledged() {
			r.more("warning: unacknowledged writes: a save, a login or a logout can fail without the store knowing")
		} else if wc.W != "majority" && strings.HasPrefix(info.Topology, "replica set") {
			r.more("warning: a failover can roll back writes the store was told had succeeded: a login lost, a logout undone; use w=majority")
		}
	} else {
		def := "the server's default applies"
		raw, err := c.client.Database("admin").RunCommand(ctx, bson.D{{Key: "getDefaultRWConcern", Value: 1}}).Raw()
		switch {
		case err == nil:
			if d, ok := raw.Lookup("defaultWriteConcern").DocumentOK(); ok {
				def = "the server's default applies, " + d.String()
			}
			if src, ok := raw.Lookup("defaultWriteConcernSource").StringValueOK(); ok {
				def += " (" + src + ")"
			}
		case setup.Unsupported(err):
			def += " (the server has no getDefaultRWConcern to say which)"
		case setup.IsAnswer(err):
			def += " (getDefaultRWConcern: " + serverAnswer(err) + ")"
		}
		r.line("write concern", "none in the URI: %s", def)
		r.more("the store's writes use the client's write concern")
		if strings.HasPrefix(info.Topology, "replica set") || strings.HasPrefix(info.Topology, "sharded") {
			r.more("w=majority is recommended: with w=1, a failover can roll back a login or a logout")
		}
	}
	if rw := c.opts.RetryWrites; rw != nil && !*rw {
		r.line("retryWrites", "off (from the URI): a save that fails in a failover is an error to retry")
	} else {
		r.line("retryWrites", "on (the driver's default): each of the store's writes is retried once across a failover")
	}
}

// describeWC shows a write concern as a URI would set it.
func describeWC(wc *writeconcern.WriteConcern) string {
	var parts []string
	if wc.W != nil {
		parts = append(parts, fmt.Sprintf("w=%v", wc.W))
	}
	if wc.Journal != nil {
		parts = append(parts, fmt.Sprintf("journal=%v", *wc.Journal))
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, ", ")
}
