package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// This file is the store's whole database surface: the document format and
// every command the store sends. A request's commands filter on _id: a
// save's on {_id, rev, expiresAt > now} where the server's planner uses the
// _id index for it, on exactly {_id: …} on FerretDB v1, which uses an index
// for that shape only.

// formatVersion is the document format, in field v. A later format must
// keep reading this one.
const formatVersion = 1

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
	fieldOwner     = "owner"     // a keyed digest of the owner (SetOwner); absent without one
)

// Index names, and the TTL index's expireAfterSeconds.
const (
	expiresAtIndexName    = setup.ExpiresAtIndexName
	ownerIndexName        = setup.OwnerIndexName
	ttlExpireAfterSeconds = setup.TTLExpireAfterSeconds
)

// sweepComment marks a GC sweep's commands in the server's logs.
const sweepComment = "mongostore gc sweep"

// document is a session document.
type document struct {
	id                              string
	rev                             int64
	createdAt, updatedAt, expiresAt time.Time // millisecond precision
	maxAge                          int
	data, mac                       []byte
	owner                           string // "" for none
}

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
	if ok && version != formatVersion {
		return d, fmt.Errorf("%w: unknown format version %d", errMalformed, version)
	}
	maxAge, okAge := raw.Lookup(fieldMaxAge).AsInt64OK()
	d.maxAge = int(maxAge)
	var okID, okRev, okData, okMAC, okC, okU, okE bool
	d.id, okID = raw.Lookup(fieldID).StringValueOK()
	d.rev, okRev = raw.Lookup(fieldRev).AsInt64OK()
	d.data, okData = binaryOK(raw.Lookup(fieldData))
	d.mac, okMAC = binaryOK(raw.Lookup(fieldMAC))
	d.createdAt, okC = dateOK(raw.Lookup(fieldCreatedAt))
	d.updatedAt, okU = dateOK(raw.Lookup(fieldUpdatedAt))
	d.expiresAt, okE = dateOK(raw.Lookup(fieldExpiresAt))
	d.owner, _ = raw.Lookup(fieldOwner).StringValueOK()
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

// fields returns the document's fields but _id, as written.
func (d *document) fields() bson.D {
	f := bson.D{
		{Key: fieldVersion, Value: int32(formatVersion)},
		{Key: fieldRev, Value: d.rev},
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: d.data}},
		{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: d.mac}},
		{Key: fieldCreatedAt, Value: bson.NewDateTimeFromTime(d.createdAt)},
		{Key: fieldUpdatedAt, Value: bson.NewDateTimeFromTime(d.updatedAt)},
		{Key: fieldExpiresAt, Value: bson.NewDateTimeFromTime(d.expiresAt)},
		{Key: fieldMaxAge, Value: int64(d.maxAge)},
	}
	if d.owner != "" { // no field, and no entry in the owner index, without one
		f = append(f, bson.E{Key: fieldOwner, Value: d.owner})
	}
	return f
}

// update returns the update that makes an existing document, which has an
// owner field if hadOwner, d.
func (d *document) update(hadOwner bool) bson.D {
	u := bson.D{{Key: "$set", Value: d.fields()}}
	if hadOwner && d.owner == "" {
		u = append(u, bson.E{Key: "$unset", Value: bson.D{{Key: fieldOwner, Value: ""}}})
	}
	return u
}

// live reports whether a raw document has not expired at now (one without a
// date in expiresAt is not the store's).
func live(raw bson.Raw, now time.Time) bool {
	t, ok := dateOK(raw.Lookup(fieldExpiresAt))
	return ok && t.After(now)
}

// isVersion reports whether raw is the document version whose MAC is mac:
// the MAC covers every field a save writes.
func isVersion(raw bson.Raw, mac []byte) bool {
	m, ok := binaryOK(raw.Lookup(fieldMAC))
	return ok && len(mac) > 0 && bytes.Equal(m, mac)
}

func idFilter(id string) bson.D { return bson.D{{Key: fieldID, Value: id}} }

// ownedFilter matches the sessions whose owner digest is one of owners
// (one per key pair), expired or not: with expiresAt in the filter, or a
// sort on it, DocumentDB reads the entry of every live session (60 ms at
// 5,000 sessions, against 1 ms for the owner alone).
func ownedFilter(owners []string) bson.D {
	var owner any = owners[0]
	if len(owners) > 1 {
		owner = bson.D{{Key: "$in", Value: owners}}
	}
	return bson.D{{Key: fieldOwner, Value: owner}}
}

// collection sends the store's commands. Reads go to the primary, whatever
// the client's default: a request reads what the last one wrote. Writes
// use the client's write concern. Errors wrap ErrDatabase.
type collection struct {
	c      *mongo.Collection
	server *atomic.Int32 // serverUnknown until detect succeeds
}

// What detect found.
const (
	serverUnknown = iota
	serverPlanner // uses the _id index for {_id, …} and updates atomically
	serverExactID // FerretDB v1: an index only for exactly {_id: …}, no atomic conditional update
)

func newCollection(c *mongo.Collection) collection {
	return collection{c: c.Clone(options.Collection().SetReadPreference(readpref.Primary())), server: new(atomic.Int32)}
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
	if _, err := c.c.InsertOne(ctx, append(idFilter(d.id), d.fields()...)); err != nil {
		return dbError("insert session", err)
	}
	return nil
}

// updateAt makes the document d.id d if it is still at revision rev and
// live at now, and reports whether it did: one conditional write, served
// from the _id index by a server with a query planner.
func (c collection) updateAt(ctx context.Context, d *document, rev int64, hadOwner bool, now time.Time) (bool, error) {
	filter := bson.D{{Key: fieldID, Value: d.id}, {Key: fieldRev, Value: rev},
		{Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}}}
	res, err := c.c.UpdateOne(ctx, filter, d.update(hadOwner))
	if err != nil {
		return false, dbError("save session", err)
	}
	return res.MatchedCount > 0, nil
}

// replace makes the document d.id d, never inserting it, and returns it as
// it was (whole: FerretDB v1 refuses a projection here), or nil: the
// exact-{_id} save of FerretDB v1. With a non-zero liveAt, only a document
// live then is changed (a scan there, for saves near expiry only).
func (c collection) replace(ctx context.Context, d *document, hadOwner bool, liveAt time.Time) (bson.Raw, error) {
	filter := idFilter(d.id)
	if !liveAt.IsZero() {
		filter = append(filter, bson.E{Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(liveAt)}}})
	}
	raw, err := c.c.FindOneAndUpdate(ctx, filter, d.update(hadOwner),
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	return oneOrNone("save session", raw, err)
}

// remove deletes the document id and returns it, or nil if there was none.
func (c collection) remove(ctx context.Context, id string) (bson.Raw, error) {
	raw, err := c.c.FindOneAndDelete(ctx, idFilter(id)).Raw()
	return oneOrNone("delete session", raw, err)
}

// delete deletes the documents ids, one command each (a list of _ids is a
// scan on FerretDB v1), and says whether one existed.
func (c collection) delete(ctx context.Context, ids ...string) (bool, error) {
	var deleted bool
	for _, id := range ids {
		res, err := c.c.DeleteOne(ctx, idFilter(id))
		if err != nil {
			return deleted, dbError("delete session", err)
		}
		deleted = deleted || res.DeletedCount > 0
	}
	return deleted, nil
}

// deleteMany deletes what filter matches and returns how many it deleted.
func (c collection) deleteMany(ctx context.Context, op string, filter bson.D, comment string) (int64, error) {
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

// deleteExpired deletes every document expired at now: an index range.
func (c collection) deleteExpired(ctx context.Context, now time.Time) (int64, error) {
	filter := bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}}}
	return c.deleteMany(ctx, "delete expired sessions", filter, sweepComment)
}

// maxOwned bounds how many live sessions of one owner a listing keeps.
const maxOwned = 1000

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

// deleteOwned deletes the document id if its owner digest is owner, and
// says whether there was one.
func (c collection) deleteOwned(ctx context.Context, owner, id string) (bool, error) {
	res, err := c.c.DeleteOne(ctx, bson.D{{Key: fieldID, Value: id}, {Key: fieldOwner, Value: owner}})
	if err != nil {
		return false, dbError("end session", err)
	}
	return res.DeletedCount > 0, nil
}

// deleteOthers deletes the sessions whose owner digest is one of owners but
// the document except.
func (c collection) deleteOthers(ctx context.Context, owners []string, except string) (int64, error) {
	filter := bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$in", Value: owners}}}}
	if except != "" {
		filter = append(filter, bson.E{Key: fieldID, Value: bson.D{{Key: "$ne", Value: except}}})
	}
	return c.deleteMany(ctx, "end sessions", filter, "")
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

// createOwnerIndex creates the sparse index {owner: 1}: documents without
// an owner have no entry.
func (c collection) createOwnerIndex(ctx context.Context) error {
	return c.createIndex(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldOwner, Value: 1}}, Options: options.Index().SetName(ownerIndexName).SetSparse(true)})
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
