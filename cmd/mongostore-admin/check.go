package main

import (
	"cmp"
	"context"
	"crypto/rand"
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
with ExpiryAuto would do with the collection, and compares MONGODB_URI's
read preference and write concern with the store's. Exits 1 if NewStore
would fail there. Needs no SESSION_KEY.`,
	flags: func(fs *flag.FlagSet) body {
		return body{run: func(ctx context.Context, a *app, c *conn) error { return a.check(ctx, c) }}
	},
}

// scratchPrefix starts the name of check's scratch collections.
const scratchPrefix = "mongostore_admin_check_"

// probe is the server's answer to a trial (NotAsked: not tried), and its error; probes are check's
// trials: a TTL index, collMod of a plain index to a TTL one, and of a TTL's expireAfterSeconds.
type (
	probe struct {
		answer setup.Answer
		err    error
	}
	probes struct{ ttl, toTTL, seconds probe }
)

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
	scratch, drop := a.scratch(ctx, c)
	defer func() {
		if derr := drop(); derr != nil {
			fmt.Fprintf(a.stderr, "mongostore-admin check: %v\n", derr)
			err = cmp.Or(err, problemf("check left its scratch collection or database behind"))
		} else {
			r.line("scratch", "%s.%s, dropped", scratch.Database().Name(), scratch.Name())
		}
	}()
	pr, err := runProbes(ctx, scratch)
	if err != nil {
		return err
	}
	pr.print(r)
	verdict, fails := predict(c.coll.Name(), indexes, pr, info.Kind == setup.FerretDB1)
	for i, v := range verdict {
		r.line(map[bool]string{true: "ExpiryAuto"}[i == 0], "%s", v)
	}
	checkConcerns(ctx, c, info, r)
	if wc := c.opts.WriteConcern; fails == "" && wc != nil && !wc.Acknowledged() {
		fails = "the store needs acknowledged writes, and MONGODB_URI asks for w=0: NewStore refuses it (under ExpiryNone, every write fails)"
	}
	if fails != "" {
		return problemf("%s", fails)
	}
	return ctx.Err() // a step cut short by -timeout or Ctrl-C said less than it should
}

// checkCollection says what c's collection holds and returns its indexes.
func (a *app) checkCollection(ctx context.Context, c *conn, r report) ([]setup.Index, error) {
	names, err := c.coll.Database().ListCollectionNames(ctx, bson.D{{Key: "name", Value: c.coll.Name()}})
	if err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	} else if len(names) == 0 {
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

// scratch returns a scratch collection in c's database, and a function that drops it (and the database, if new).
func (a *app) scratch(ctx context.Context, c *conn) (*mongo.Collection, func() error) {
	db := c.coll.Database()
	existed, err := listed(ctx, db)
	if err != nil {
		existed = true // if check creates the database, it stays
		fmt.Fprintf(a.stderr, "mongostore-admin check: %v: if %s does not exist, the scratch collection creates it, and check leaves it\n", err, db.Name())
	}
	scratch := db.Collection(scratchPrefix+strings.ToLower(rand.Text()[:8]), options.Collection().SetWriteConcern(writeconcern.W1())) // w=0 would hide the server's answers
	return scratch, func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := scratch.Drop(ctx); err != nil {
			return fmt.Errorf("could not drop the scratch collection %s.%s: %w; drop it by hand: db.getCollection(%q).drop()",
				db.Name(), scratch.Name(), err, scratch.Name())
		}
		if existed {
			return nil
		} else if now, err := listed(ctx, db); err != nil || !now {
			return err
		}
		if names, err := db.ListCollectionNames(ctx, bson.D{}); err != nil || len(names) > 0 { // another's now
			return err
		}
		return db.Drop(ctx)
	}
}

// listed reports whether the server lists the database db.
func listed(ctx context.Context, db *mongo.Database) (bool, error) {
	names, err := db.Client().ListDatabaseNames(ctx, bson.D{{Key: "name", Value: db.Name()}})
	return len(names) > 0, wrap("list databases", err)
}

// runProbes tries the probes on scratch, reading answers as the store does (setup.Read); failures are errors.
func runProbes(ctx context.Context, scratch *mongo.Collection) (p probes, err error) {
	create := func(ttl ...int32) error {
		opts := options.Index()
		for _, s := range ttl {
			opts.SetExpireAfterSeconds(s)
		}
		_, err := scratch.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: setup.FieldExpiresAt, Value: 1}}, Options: opts})
		return err
	}
	drop := func() error { return scratch.Indexes().DropOne(ctx, setup.ExpiresAtIndexName) }
	collMod := func() error {
		return scratch.Database().RunCommand(ctx, bson.D{{Key: "collMod", Value: scratch.Name()}, {Key: "index", Value: bson.D{
			{Key: "name", Value: setup.ExpiresAtIndexName}, {Key: "expireAfterSeconds", Value: int64(setup.TTLExpireAfterSeconds)}}}}).Err()
	}
	if err := p.ttl.try("create a TTL index", create(setup.TTLExpireAfterSeconds), setup.TTLRefused); err != nil {
		return p, err
	}
	if p.ttl.answer == setup.Accepted {
		if err := errors.Join(drop(), create(3600)); err != nil {
			return p, fmt.Errorf("replace the scratch TTL index by one of an hour: %w", err)
		}
		if err := errors.Join(p.seconds.try("collMod", collMod(), setup.Unsupported), drop()); err != nil {
			return p, err
		}
	}
	if err := create(); setup.IsAnswer(err) {
		return p, nil // no plain index: collMod not tried
	} else if err != nil {
		return p, fmt.Errorf("create a plain index on a scratch collection: %w", err)
	}
	return p, p.toTTL.try("collMod", collMod(), setup.Unsupported)
}

// try records in p the answer err to what (refused: which are refusals), or returns err if it is none.
func (p *probe) try(what string, err error, refused func(error) bool) error {
	var ok bool
	if p.answer, ok = setup.Read(err, refused); !ok {
		return fmt.Errorf("%s on a scratch collection: %w", what, err)
	}
	p.err = err
	return nil
}

// result says how p went.
func (p probe) result() string {
	switch p.answer {
	case setup.NotAsked:
		return "not tried"
	case setup.Accepted:
		return "yes"
	}
	return "no: " + serverAnswer(p.err)
}

// print shows the probes' results (what NewStore does with them: predict).
func (pr probes) print(r report) {
	switch pr.ttl.answer {
	case setup.Accepted:
		r.line("TTL indexes", "yes: createIndexes {expiresAt: 1} with expireAfterSeconds 0 succeeded on a scratch collection")
	case setup.Refused:
		r.line("TTL indexes", "no: %s", serverAnswer(pr.ttl.err))
		r.more("ExpiryAuto falls back to the GC goroutine; ExpiryTTL makes NewStore fail")
	default:
		r.line("TTL indexes", "unknown: %s", serverAnswer(pr.ttl.err))
	}
	label := "collMod"
	if pr.seconds.answer != setup.NotAsked {
		r.line(label, "a TTL index's expireAfterSeconds (3600 to 0): %s", pr.seconds.result())
		label = ""
	}
	r.line(label, "a plain index to a TTL one: %s", pr.toTTL.result())
}

// predict says what NewStore with ExpiryAuto would do with indexes (setup.Decide, with pr's answers), on FerretDB v1 if v1; fails if it would fail.
func predict(collection string, indexes []setup.Index, pr probes, v1 bool) (verdict []string, fails string) {
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
	if verdict, fails = describePlan(collection, idx, steps, setup.Decide(idx, a).Outcome); fails == "" && !setup.ServesOwners(indexes, v1) {
		verdict = append(verdict, "NewStore creates "+setup.OwnerIndexName+map[bool]string{false: " (partial)", true: " (sparse)"}[v1]+" for the users' session lists")
	}
	return verdict, fails
}

// describePlan says what NewStore does with idx, the index on expiresAt (or nil), by steps.
func describePlan(collection string, idx *setup.Index, steps []setup.Step, outcome setup.Outcome) (verdict []string, fails string) {
	const gc = "GC: the GC goroutine deletes expired sessions every GCInterval (1 minute by default)"
	switch {
	case outcome == setup.Conflict:
		fails = "NewStore would fail (ErrInvalidConfig): " + setup.ConflictReason(collection, idx)
		return []string{fails}, fails
	case outcome == setup.Failed:
		fails = "NewStore would fail (ErrDatabase): the server answered the TTL index with an error the store does not take for 'not supported'"
		return []string{fails}, fails
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
	}
	return []string{"TTL: NewStore turns " + idx.Name + " into a TTL index with expireAfterSeconds 0 (collMod)"}, ""
}

// checkConcerns compares the URI's read preference and write concern with the store's.
func checkConcerns(ctx context.Context, c *conn, info serverInfo, r report) {
	rp := "primary (the driver's default: the URI sets none)"
	if p := c.opts.ReadPreference; p != nil && p.Mode() == readpref.PrimaryMode {
		rp = "primary (from the URI)"
	} else if p != nil {
		rp = p.Mode().String() + " (from the URI): the application's other reads may see stale data"
	}
	r.line("read pref", "client default %s", rp)
	r.more("the store reads from the primary whatever the client's default: a request sees what the previous one wrote")
	replicated := strings.HasPrefix(info.Topology, "replica set")
	switch wc := c.opts.WriteConcern; {
	case wc == nil:
		r.line("write concern", "none in the URI: the server's default applies%s", defaultWriteConcern(ctx, c.client))
		r.more("the store's writes use the client's write concern")
		if replicated || strings.HasPrefix(info.Topology, "sharded") {
			r.more("w=majority is recommended: with w=1, a failover can roll back a login or a logout")
		}
	default:
		r.line("write concern", "%s (from the URI)%s", describeWC(wc.W, wc.Journal), map[bool]string{true: "; the store's writes use it"}[wc.Acknowledged()])
		if !wc.Acknowledged() {
			r.more("unacknowledged writes: the store cannot tell a save that met a concurrent one, nor what a logout deleted; use w=1 or w=majority")
		} else if wc.W != "majority" && replicated {
			r.more("warning: a failover can roll back writes the store was told had succeeded: a login lost, a logout undone; use w=majority")
		}
	}
	if rw := c.opts.RetryWrites; rw != nil && !*rw {
		r.line("retryWrites", "off (from the URI): a save that fails in a failover is an error to retry")
	} else {
		r.line("retryWrites", "on (the driver's default): each of the store's writes is retried once across a failover")
	}
}

// defaultWriteConcern says the server's default (", {w: …} (source)"), or why not.
func defaultWriteConcern(ctx context.Context, client *mongo.Client) string {
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "getDefaultRWConcern", Value: 1}}).Raw()
	switch {
	case setup.Unsupported(err):
		return " (the server has no getDefaultRWConcern to say which)"
	case setup.IsAnswer(err):
		return " (getDefaultRWConcern: " + serverAnswer(err) + ")"
	case err != nil:
		return " (not known: getDefaultRWConcern got no answer)"
	}
	s := ""
	if d, ok := raw.Lookup("defaultWriteConcern").DocumentOK(); ok {
		s = ", " + d.String()
	}
	if src, ok := raw.Lookup("defaultWriteConcernSource").StringValueOK(); ok {
		s += " (" + src + ")"
	}
	return s
}

// describeWC shows a write concern's w and journal as a URI sets them.
func describeWC(w any, journal *bool) string {
	s := ""
	if w != nil {
		s = fmt.Sprintf("w=%v", w)
	}
	if journal != nil {
		s = strings.TrimPrefix(fmt.Sprintf("%s, journal=%v", s, *journal), ", ")
	}
	return cmp.Or(s, "empty")
}

// serverInfo is what buildInfo and hello say: kind, version (FerretDB's own), claimed MongoDB version, topology.
type serverInfo struct {
	Kind           string `json:"kind"`
	Version        string `json:"version"`
	MongoDBVersion string `json:"mongodbVersion"`
	Topology       string `json:"topology"`
}

func (s serverInfo) String() string {
	if s.Kind == setup.MongoDB {
		return "MongoDB " + s.Version + ", " + s.Topology
	}
	name := map[bool]string{true: s.Kind, false: "FerretDB"}[s.Version == unknownVersion] + " " + s.Version
	return name + map[bool]string{true: " on PostgreSQL with DocumentDB"}[s.Kind == setup.FerretDB2] +
		" (claims MongoDB " + s.MongoDBVersion + "), " + s.Topology
}

const unknownVersion = "(version unknown)"

// getServerInfo asks the server what it is, as NewStore does.
func getServerInfo(ctx context.Context, db *mongo.Database) (serverInfo, error) {
	raw, err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil && !setup.Unsupported(err) {
		return serverInfo{}, fmt.Errorf("buildInfo: %w", err)
	}
	b := setup.ParseBuildInfo(raw)
	info := serverInfo{b.Kind, cmp.Or(b.Version, unknownVersion), cmp.Or(b.MongoDBVersion, unknownVersion), "standalone"}
	hello, err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return info, fmt.Errorf("hello: %w", err)
	}
	if msg, _ := hello.Lookup("msg").StringValueOK(); msg == "isdbgrid" {
		info.Topology = "sharded cluster (through mongos)"
	} else if set, ok := hello.Lookup("setName").StringValueOK(); ok {
		info.Topology = "replica set " + set
	}
	return info, nil
}

// serverAnswer shows a server's error with its code.
func serverAnswer(err error) string {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return fmt.Sprintf("code %d (%s): %s", ce.Code, ce.Name, ce.Message)
	}
	return err.Error()
}
