package mongostore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// This file is the store's whole database surface: the document format and
// every command the store sends. A request's commands filter on _id: a
// save's on {_id, rev} where the server's planner uses the _id index for
// it, on exactly {_id: …} on FerretDB v1, which uses an index for that
// shape only.

// formatVersion is the document format written, in field v. Format 2 added
// lineage; format 1 documents are still read, and saved as format 2.
const (
	formatVersion = 2
	format1       = 1
)

// Field names of a session document.
const (
	fieldID        = "_id"       // hex SHA-256 of the session ID
	fieldVersion   = "v"         // formatVersion
	fieldRev       = "rev"       // revision: 1 when inserted, one more at every save
	fieldData      = "data"      // the encoded values in an envelope (see sealer.wrap)
	fieldMAC       = "mac"       // HMAC-SHA256 of every field above and below but owner
	fieldCreatedAt = "createdAt" // when the session began; the absolute timeout counts from it
	fieldUpdatedAt = "updatedAt" // when it was last saved
	fieldExpiresAt = "expiresAt" // when it ends; the TTL index deletes it then
	fieldMaxAge    = "maxAge"    // the session's own Options.MaxAge, in seconds
	fieldLineage   = "lineage"   // format 2: the _id its sign-in chain began at; absent where that is _id
	fieldOwner     = "owner"     // a keyed digest of the owner (SetOwner); absent without one
)

// Index names, and the TTL index's expireAfterSeconds. The owner and
// lineage indexes are partial: a document without the field has no entry,
// and costs its saves nothing there.
const (
	expiresAtIndexName    = setup.ExpiresAtIndexName
	ownerIndexName        = setup.OwnerIndexName
	lineageIndexName      = setup.LineageIndexName
	sparseOwnerIndexName  = setup.SparseOwnerIndexName // format 1's
	ttlExpireAfterSeconds = setup.TTLExpireAfterSeconds
)

// sweepComment marks a GC sweep's commands in the server's logs.
const sweepComment = "mongostore gc sweep"

// document is a session document.
type document struct {
	id                              string
	format                          int64 // formatVersion for every document written
	lineage                         string
	rev                             int64
	createdAt, updatedAt, expiresAt time.Time // millisecond precision
	maxAge                          int
	data, mac                       []byte
	owner                           string // "" for none
}

// chain returns the _id of the document its sign-in chain began at:
// RegenerateID moves a session to a new _id and keeps its chain.
func (d *document) chain() string { return cmp.Or(d.lineage, d.id) }

var errMalformed = errors.New("malformed session document")

// parseDocument reads a raw session document, whatever the bytes.
func parseDocument(raw bson.Raw) (document, error) {
	var d document
	if err := raw.Validate(); err != nil {
		return d, fmt.Errorf("%w: %w", errMalformed, err)
	}
	get := func(field string, ok bool) error {
		if !ok {
			return fmt.Errorf("%w: field %s is missing or of the wrong type", errMalformed, field)
		}
		return nil
	}
	version, ok := raw.Lookup(fieldVersion).AsInt64OK()
	if ok && version != format1 && version != formatVersion {
		return d, fmt.Errorf("%w: unknown format version %d", errMalformed, version)
	}
	maxAge, okAge := raw.Lookup(fieldMaxAge).AsInt64OK()
	d.format, d.maxAge = version, int(maxAge)
	var okID, okRev, okData, okMAC, okC, okU, okE bool
	d.id, okID = raw.Lookup(fieldID).StringValueOK()
	d.rev, okRev = raw.Lookup(fieldRev).AsInt64OK()
	d.data, okData = binaryOK(raw.Lookup(fieldData))
	d.mac, okMAC = binaryOK(raw.Lookup(fieldMAC))
	d.createdAt, okC = dateOK(raw.Lookup(fieldCreatedAt))
	d.updatedAt, okU = dateOK(raw.Lookup(fieldUpdatedAt))
	d.expiresAt, okE = dateOK(raw.Lookup(fieldExpiresAt))
	d.owner, _ = raw.Lookup(fieldOwner).StringValueOK()
	if version == formatVersion {
		d.lineage, _ = raw.Lookup(fieldLineage).StringValueOK()
	}
	return d, errors.Join(get(fieldVersion, ok), get(fieldID, okID), get(fieldRev, okRev), get(fieldData, okData),
		get(fieldMAC, okMAC), get(fieldCreatedAt, okC), get(fieldUpdatedAt, okU), get(fieldExpiresAt, okE),
		get(fieldMaxAge, okAge))
}

func binaryOK(v bson.RawValue) ([]byte, bool) {
	subtype, b, ok := v.BinaryOK()
	return b, ok && subtype == bson.TypeBinaryGeneric
}

func dateOK(v bson.RawValue) (time.Time, bool) {
	ms, ok := v.DateTimeOK()
	return time.UnixMilli(ms), ok
}

// Documents, filters and updates are built as BSON bytes: the driver sends
// them as they are, with none of the reflection that marshalling a bson.D
// takes.

// raw returns the document as written.
func (d *document) raw() bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 256+len(d.data)))
	b = d.appendFields(bsoncore.AppendStringElement(b, fieldID, d.id))
	b, _ = bsoncore.AppendDocumentEnd(b, i)
	return b
}

// appendFields appends the document's fields but _id to b.
func (d *document) appendFields(b []byte) []byte {
	b = bsoncore.AppendInt32Element(b, fieldVersion, formatVersion)
	b = bsoncore.AppendInt64Element(b, fieldRev, d.rev)
	b = bsoncore.AppendBinaryElement(b, fieldData, bson.TypeBinaryGeneric, d.data)
	b = bsoncore.AppendBinaryElement(b, fieldMAC, bson.TypeBinaryGeneric, d.mac)
	b = bsoncore.AppendDateTimeElement(b, fieldCreatedAt, d.createdAt.UnixMilli())
	b = bsoncore.AppendDateTimeElement(b, fieldUpdatedAt, d.updatedAt.UnixMilli())
	b = bsoncore.AppendDateTimeElement(b, fieldExpiresAt, d.expiresAt.UnixMilli())
	b = bsoncore.AppendInt64Element(b, fieldMaxAge, int64(d.maxAge))
	if d.lineage != "" && d.lineage != d.id { // no field, and no index entry, for a chain's first document
		b = bsoncore.AppendStringElement(b, fieldLineage, d.lineage)
	}
	if d.owner != "" { // likewise without an owner
		b = bsoncore.AppendStringElement(b, fieldOwner, d.owner)
	}
	return b
}

// update returns the update that makes an existing document, which has an
// owner field if hadOwner, d.
func (d *document) update(hadOwner bool) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 256+len(d.data)))
	j, b := bsoncore.AppendDocumentElementStart(b, "$set")
	b, _ = bsoncore.AppendDocumentEnd(d.appendFields(b), j)
	if hadOwner && d.owner == "" {
		j, b = bsoncore.AppendDocumentElementStart(b, "$unset")
		b, _ = bsoncore.AppendDocumentEnd(bsoncore.AppendStringElement(b, fieldOwner, ""), j)
	}
	b, _ = bsoncore.AppendDocumentEnd(b, i)
	return b
}

// live reports whether a raw document has not expired at now (one without a
// date in expiresAt is not the store's).
func live(raw bson.Raw, now time.Time) bool {
	t, ok := dateOK(raw.Lookup(fieldExpiresAt))
	return ok && t.After(now)
}

// version is what a save expects the stored document to be: the one it
// loaded, or last wrote.
type version struct {
	rev       int64
	mac       []byte // the MAC covers every field a save writes: it names the version
	owned     bool   // the document has an owner field
	expiresAt time.Time
}

// versionOf returns the version of a raw document.
func versionOf(raw bson.Raw) version {
	v := version{}
	v.rev, _ = raw.Lookup(fieldRev).AsInt64OK()
	v.mac, _ = binaryOK(raw.Lookup(fieldMAC))
	_, err := raw.LookupErr(fieldOwner)
	v.owned = err == nil
	v.expiresAt, _ = dateOK(raw.Lookup(fieldExpiresAt))
	return v
}

// written returns the version d is once written.
func (d *document) written() version {
	return version{rev: d.rev, mac: d.mac, owned: d.owner != "", expiresAt: d.expiresAt}
}

// idFilter returns {_id: id}.
func idFilter(id string) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 16+len(id)))
	b, _ = bsoncore.AppendDocumentEnd(bsoncore.AppendStringElement(b, fieldID, id), i)
	return b
}

// saveFilter returns {_id: id, rev: rev}.
func saveFilter(id string, rev int64) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 32+len(id)))
	b = bsoncore.AppendInt64Element(bsoncore.AppendStringElement(b, fieldID, id), fieldRev, rev)
	b, _ = bsoncore.AppendDocumentEnd(b, i)
	return b
}

// collection sends the store's commands. Reads go to the primary, whatever
// the client's default: a request reads what the last one wrote. Writes
// use the client's write concern. Errors wrap ErrDatabase.
type collection struct {
	c      *mongo.Collection
	server *atomic.Int32 // serverUnknown until detect succeeds
	saving *idLocks      // FerretDB v1: one write of a document at a time in this process
	margin time.Duration // FerretDB v1: a save this near expiry checks it in its filter
}

// What detect found.
const (
	serverUnknown = iota
	serverPlanner // uses the _id index for {_id, …} and updates atomically
	serverExactID // FerretDB v1: an index only for exactly {_id: …}, no atomic conditional update
)

func newCollection(c *mongo.Collection, timeout time.Duration) collection {
	return collection{c: c.Clone(options.Collection().SetReadPreference(readpref.Primary())), server: new(atomic.Int32),
		saving: &idLocks{}, margin: timeout}
}

// detect finds out, once, whether the server is FerretDB v1, which
// answers buildInfo with a ferretdbVersion field (v2 with a ferretdb
// document). A server that refuses buildInfo is taken to have a planner.
func (c collection) detect(ctx context.Context) error {
	if c.server.Load() != serverUnknown {
		return nil
	}
	raw, err := c.c.Database().RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil && !setup.Unsupported(err) {
		return dbError("buildInfo", err)
	}
	kind := int32(serverPlanner)
	if setup.ParseBuildInfo(raw).ExactIDOnly() {
		kind = serverExactID
	}
	c.server.Store(kind)
	return nil
}

// exactID reports whether detect found FerretDB v1.
func (c collection) exactID() bool { return c.server.Load() == serverExactID }

func dbError(op string, err error) error { return fmt.Errorf("%w: %s: %w", ErrDatabase, op, err) }

// oneOrNone returns the document a command returned, or nil for none.
func oneOrNone(op string, doc bson.Raw, err error) (bson.Raw, error) {
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, dbError(op, err)
	}
	return doc, nil
}

// find returns the document id, or nil if there is none.
func (c collection) find(ctx context.Context, id string) (bson.Raw, error) {
	raw, err := c.c.FindOne(ctx, idFilter(id)).Raw()
	return oneOrNone("load session", raw, err)
}

// insert inserts the document d.
func (c collection) insert(ctx context.Context, d *document) error {
	if _, err := c.c.InsertOne(ctx, d.raw()); err != nil {
		return dbError("insert session", err)
	}
	return nil
}

// save makes the document d.id d if it is still live at now and at version
// v, and returns nil. If another save changed it since, it returns that
// save's document, and the version the next attempt builds on. A document
// no longer live gives ErrSessionGone: it is never inserted again. A rev
// names one version, and v says when that one expires: past it, only a
// version another save wrote can take this one.
func (c collection) save(ctx context.Context, d *document, v version, now time.Time) (bson.Raw, version, error) {
	if err := c.detect(ctx); err != nil {
		return nil, v, err
	}
	if c.exactID() {
		return c.saveExactID(ctx, d, v, now)
	}
	if v.expiresAt.After(now) { // else v is no longer live: only another save's version can be
		res, err := c.c.UpdateOne(ctx, saveFilter(d.id, v.rev), d.update(v.owned))
		if err != nil || res.MatchedCount > 0 {
			return nil, v, dbErrorOrNil("save session", err)
		}
	}
	raw, err := c.find(ctx, d.id)
	switch {
	case err != nil:
		return nil, v, err
	case raw == nil || !live(raw, now):
		return nil, v, ErrSessionGone
	}
	return raw, versionOf(raw), nil
}

// saveExactID is save on FerretDB v1: a write on exactly {_id} that
// returns the document it replaced (the caller holds serialize's lock). Near its expiry (within margin) the
// filter adds expiresAt > now, so an expired session is never extended.
// Having written over another save's document, the next attempt builds on d.
func (c collection) saveExactID(ctx context.Context, d *document, v version, now time.Time) (bson.Raw, version, error) {
	var filter any = idFilter(d.id)
	if !v.expiresAt.After(now.Add(c.margin)) {
		filter = bson.D{{Key: fieldID, Value: d.id}, {Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}}}
	}
	raw, err := c.c.FindOneAndUpdate(ctx, filter, d.update(v.owned), options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	before, err := oneOrNone("save session", raw, err)
	switch {
	case err != nil:
		return nil, v, err
	case before == nil:
		return nil, v, ErrSessionGone
	case !live(before, now): // the write reached an expired session: put it back, for the load or sweep that reports it
		if err := c.restore(ctx, before, d.mac); err != nil {
			return nil, v, fmt.Errorf("%w; %w", ErrSessionGone, err)
		}
		return nil, v, ErrSessionGone
	case isVersion(before, v.mac):
		return nil, v, nil
	}
	next := d.written()
	next.rev = max(next.rev, versionOf(before).rev)
	return before, next, nil
}

// restore puts back theirs, the document a save wrote over as ours (its
// MAC), where the server has no atomic conditional write (FerretDB v1):
// save wrote over it before it could tell. A document written since stays.
func (c collection) restore(ctx context.Context, theirs bson.Raw, ours []byte) error {
	if !c.exactID() {
		return nil
	}
	id, _ := theirs.Lookup(fieldID).StringValueOK()
	filter := bson.D{{Key: fieldID, Value: id}, {Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: ours}}}
	if _, err := c.c.ReplaceOne(ctx, filter, theirs); err != nil {
		return dbError("restore session", err)
	}
	return nil
}

// isVersion reports whether raw is the document version whose MAC is mac.
func isVersion(raw bson.Raw, mac []byte) bool {
	m, ok := binaryOK(raw.Lookup(fieldMAC))
	return ok && len(mac) > 0 && bytes.Equal(m, mac)
}

func dbErrorOrNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return dbError(op, err)
}

// serialize waits until no other save of document id in this process is
// under way, where the server has no atomic conditional write (FerretDB
// v1's findAndModify reads, then writes), and returns what ends the wait
// of the next one.
func (c collection) serialize(ctx context.Context, id string) (unlock func(), err error) {
	if err := c.detect(ctx); err != nil {
		return nil, err
	}
	if !c.exactID() {
		return func() {}, nil
	}
	return c.saving.lock(ctx, id)
}

// remove deletes the document id and returns it, or nil if there was none:
// where the server answers none while a concurrent update commits
// (DocumentDB), it looks again.
func (c collection) remove(ctx context.Context, id string) (bson.Raw, error) {
	for range maxEndRounds {
		raw, err := c.c.FindOneAndDelete(ctx, idFilter(id)).Raw()
		if raw, err = oneOrNone("delete session", raw, err); raw != nil || err != nil {
			return raw, err
		}
		if raw, err = c.find(ctx, id); raw == nil || err != nil {
			return nil, err
		}
	}
	return nil, dbError("delete session", errors.New("the session kept being written while it was moved"))
}

// insertRaw inserts raw, a document a failed RegenerateID took out; one
// there already (written meanwhile) stays.
func (c collection) insertRaw(ctx context.Context, raw bson.Raw) error {
	if _, err := c.c.InsertOne(ctx, raw); err != nil && !mongo.IsDuplicateKeyError(err) {
		return dbError("put session back", err)
	}
	return nil
}

// delete deletes the document id, and says whether it existed.
func (c collection) delete(ctx context.Context, id string) (bool, error) {
	n, err := c.deleteMany(ctx, "delete session", idFilter(id), "")
	return n > 0, err
}

// maxEndRounds bounds how often an ending looks again for what is left.
const maxEndRounds = 8

// endChain deletes the document id and says whether it ended the chain
// lineage (the _id its chain began at). Where id is gone, a concurrent
// RegenerateID may have moved the session, or the server may have answered
// nothing deleted while a concurrent update committed (DocumentDB): it
// deletes every document of the chain, and looks again until none is left.
// A moved session (id is not lineage) gets one sweep of its chain even when
// id was there: a RegenerateID under way may still hold the other one.
func (c collection) endChain(ctx context.Context, id, lineage string) (bool, error) {
	ended, err := c.delete(ctx, id)
	if err != nil || (ended && id == lineage) {
		return ended, err
	}
	filters := []any{idFilter(lineage), bson.D{{Key: fieldLineage, Value: lineage}}}
	if id != lineage {
		filters = append(filters, idFilter(id))
	}
	for range maxEndRounds {
		left := false
		for _, f := range filters {
			n, err := c.deleteMany(ctx, "end session", f, "")
			if err != nil {
				return ended, err
			}
			ended = ended || n > 0
			raw, err := c.c.FindOne(ctx, f).Raw()
			if raw, err = oneOrNone("end session", raw, err); err != nil {
				return ended, err
			}
			left = left || raw != nil
		}
		if !left {
			return ended, nil
		}
	}
	return ended, dbError("end session", errors.New("the session kept being written while it was ended"))
}

// deleteMany deletes what filter matches and returns how many it deleted.
func (c collection) deleteMany(ctx context.Context, op string, filter any, comment string) (int64, error) {
	opts := options.DeleteMany()
	if comment != "" {
		opts.SetComment(comment)
	}
	res, err := c.c.DeleteMany(ctx, filter, opts)
	if err != nil {
		return 0, dbError(op, err)
	}
	return res.DeletedCount, nil
}

// expiredFilter matches the documents expired at now: an index range.
func expiredFilter(now time.Time) bson.D {
	return bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}}}
}

// deleteExpired deletes every document expired at now.
func (c collection) deleteExpired(ctx context.Context, now time.Time) (int64, error) {
	return c.deleteMany(ctx, "delete expired sessions", expiredFilter(now), sweepComment)
}

// findExpired returns up to limit documents expired at now.
func (c collection) findExpired(ctx context.Context, now time.Time, limit int) ([]bson.Raw, error) {
	cur, err := c.c.Find(ctx, expiredFilter(now), options.Find().SetLimit(int64(limit)).SetComment(sweepComment))
	if err != nil {
		return nil, dbError("find expired sessions", err)
	}
	return all(ctx, cur, "find expired sessions", limit, func(bson.Raw) bool { return true })
}

// deleteExpiredOne deletes the document id if it is expired at now or
// still at revision rev, and says whether it did.
func (c collection) deleteExpiredOne(ctx context.Context, id any, rev int64, now time.Time) (bool, error) {
	filter := bson.D{{Key: fieldID, Value: id}, {Key: "$or", Value: bson.A{expiredFilter(now), bson.D{{Key: fieldRev, Value: rev}}}}}
	n, err := c.deleteMany(ctx, "delete expired session", filter, sweepComment)
	return n > 0, err
}

// findLive returns up to limit documents live at now whose _id comes
// after after, in _id order: from the _id index.
func (c collection) findLive(ctx context.Context, after string, now time.Time, limit int) ([]bson.Raw, error) {
	filter := bson.D{{Key: fieldID, Value: bson.D{{Key: "$gt", Value: after}}},
		{Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}}}
	cur, err := c.c.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: fieldID, Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, dbError("read sessions", err)
	}
	return all(ctx, cur, "read sessions", limit, func(bson.Raw) bool { return true })
}

// maxOwned bounds how many live sessions of one owner a listing keeps.
const maxOwned = 1000

// ownedFilter matches the sessions whose owner digest is one of owners
// (one per key pair), expired or not: with expiresAt in the filter, or a
// sort on it, DocumentDB reads the entry of every live session (60 ms at
// 5,000 sessions, against 1 ms for the owner alone). $exists lets MongoDB
// use the partial owner index for $in.
func ownedFilter(owners []string) bson.D {
	cond := bson.D{{Key: "$exists", Value: true}}
	if len(owners) == 1 {
		cond = append(bson.D{{Key: "$eq", Value: owners[0]}}, cond...)
	} else {
		cond = append(bson.D{{Key: "$in", Value: owners}}, cond...)
	}
	return bson.D{{Key: fieldOwner, Value: cond}}
}

// findOwned returns the sessions live at now whose owner digest is one of
// owners, at most maxOwned, from the owner index: it reads past the expired
// ones that the TTL monitor or the GC has not deleted yet.
func (c collection) findOwned(ctx context.Context, owners []string, now time.Time) ([]bson.Raw, error) {
	cur, err := c.c.Find(ctx, ownedFilter(owners))
	if err != nil {
		return nil, dbError("list sessions", err)
	}
	return all(ctx, cur, "list sessions", maxOwned, func(doc bson.Raw) bool { return live(doc, now) })
}

// all reads the documents of cur that keep says to keep, at most limit.
func all(ctx context.Context, cur *mongo.Cursor, op string, limit int, keep func(bson.Raw) bool) ([]bson.Raw, error) {
	var docs []bson.Raw
	for len(docs) < limit && cur.Next(ctx) {
		if keep(cur.Current) {
			docs = append(docs, append(bson.Raw(nil), cur.Current...))
		}
	}
	if err := errors.Join(cur.Err(), cur.Close(ctx)); err != nil {
		return nil, dbError(op, err)
	}
	return docs, nil
}

// indexSpecs returns the collection's indexes (none if it does not exist).
func (c collection) indexSpecs(ctx context.Context) ([]bson.Raw, error) {
	cur, err := c.c.Indexes().List(ctx)
	if setup.HasCode(err, setup.CodeNamespaceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, dbError("list indexes", err)
	}
	return all(ctx, cur, "list indexes", math.MaxInt, func(bson.Raw) bool { return true })
}

// createExpiresAtIndex creates the index {expiresAt: 1}, a TTL one if ttl.
func (c collection) createExpiresAtIndex(ctx context.Context, ttl bool) error {
	opts := options.Index()
	if ttl {
		opts.SetExpireAfterSeconds(ttlExpireAfterSeconds)
	}
	return c.createIndex(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: 1}}, Options: opts})
}

// createPartialIndex creates the index called name on field, with an entry
// for the documents that have the field only: partial, or sparse where the
// server refuses partial indexes (FerretDB v1).
func (c collection) createPartialIndex(ctx context.Context, name, field string) error {
	opts := options.Index().SetName(name).SetPartialFilterExpression(bson.D{{Key: field, Value: bson.D{{Key: "$exists", Value: true}}}})
	err := c.createIndex(ctx, mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}, Options: opts})
	if setup.Unsupported(err) {
		err = c.createIndex(ctx, mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}, Options: options.Index().SetName(name).SetSparse(true)})
	}
	return err
}

func (c collection) createIndex(ctx context.Context, model mongo.IndexModel) error {
	if _, err := c.c.Indexes().CreateOne(ctx, model); err != nil {
		return dbError("create index", err)
	}
	return nil
}

// setTTL makes the index called name expire documents at their expiresAt.
func (c collection) setTTL(ctx context.Context, name string) error {
	err := c.c.Database().RunCommand(ctx, bson.D{
		{Key: "collMod", Value: c.c.Name()},
		{Key: "index", Value: bson.D{{Key: "name", Value: name}, {Key: "expireAfterSeconds", Value: int64(ttlExpireAfterSeconds)}}},
	}).Err()
	if err != nil {
		return dbError("collMod", err)
	}
	return nil
}

// dropIndex drops the index called name; one already gone is fine.
func (c collection) dropIndex(ctx context.Context, name string) error {
	if err := c.c.Indexes().DropOne(ctx, name); err != nil && !setup.HasCode(err, setup.CodeIndexNotFound) {
		return dbError("drop index", err)
	}
	return nil
}

// idLocks serializes the saves of one session within this process, for a
// server without an atomic conditional update (FerretDB v1).
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	ch   chan struct{}
	refs int
}

// lock waits for the lock of id, or for ctx to end, and returns its unlock.
func (l *idLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*idLock)
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{ch: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, dbError("wait for a concurrent save", ctx.Err())
	}
}
