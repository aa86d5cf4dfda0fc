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
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// This file is the store's whole database surface: the document format and
// every command the store sends. Each command on one session addresses its
// document by _id, the chain ID, so that a sharded collection (shard key
// {_id: "hashed"}) sends it to one shard.

// Document formats, in field v. Format 3 is written: one document per
// sign-in chain, its _id the chain ID, sid the hash of the current secret.
// Formats 1 and 2 (whose _id is the hash of the secret) are read, and
// adopted in place by their next save.
const (
	format1       = 1
	format2       = 2 // format 1 with lineage
	formatVersion = 3
)

// Field names of a session document.
const (
	fieldID        = "_id"       // the chain ID (formats 1 and 2: the hex SHA-256 of the session ID)
	fieldVersion   = "v"         // the format
	fieldSID       = "sid"       // format 3: the hex SHA-256 of the current secret
	fieldRev       = "rev"       // revision: 1 when inserted, one more at every save
	fieldData      = "data"      // the encoded values in an envelope (see sealer.wrap)
	fieldMAC       = "mac"       // HMAC-SHA256 of every field above and below but owner and the lock's
	fieldCreatedAt = "createdAt" // when the session began; the absolute timeout counts from it
	fieldUpdatedAt = "updatedAt" // when it was last saved
	fieldExpiresAt = "expiresAt" // when it ends; the TTL index deletes it then
	fieldMaxAge    = "maxAge"    // the session's own Options.MaxAge, in seconds
	fieldLineage   = "lineage"   // format 2: the _id its chain began at; removed by the next save
	fieldOwner     = "owner"     // a keyed digest of the owner (SetOwner); absent without one
	fieldLock      = "lock"      // the holder of the session's lock (exclusive.go); absent when free
	fieldLockUntil = "lockUntil" // when a lock its holder never released lapses
)

// Index names, and the TTL index's expireAfterSeconds. The owner index is
// partial: a document without an owner has no entry, and costs its saves
// nothing there.
const (
	expiresAtIndexName    = setup.ExpiresAtIndexName
	ownerIndexName        = setup.OwnerIndexName
	lineageIndexName      = setup.LineageIndexName // format 2's, dropped by NewStore
	ttlExpireAfterSeconds = setup.TTLExpireAfterSeconds
)

// sweepComment marks a GC sweep's commands in the server's logs.
const sweepComment = "mongostore gc sweep"

// document is a session document.
type document struct {
	id                              string // the chain ID
	format                          int64
	sid                             string // the secret's hash; formats 1 and 2: id
	lineage                         string // format 2, read for its MAC only
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
	f := fieldsOf(raw)
	version, ok := f.version.AsInt64OK()
	if ok && (version < format1 || version > formatVersion) {
		return d, fmt.Errorf("%w: unknown format version %d", errMalformed, version)
	}
	maxAge, okAge := f.maxAge.AsInt64OK()
	d.format, d.maxAge = version, int(maxAge)
	var okID, okSID, okRev, okData, okMAC, okC, okU, okE bool
	d.id, okID = f.id.StringValueOK()
	d.sid, okSID = d.id, true
	if version == formatVersion {
		d.sid, okSID = f.sid.StringValueOK()
	}
	d.rev, okRev = f.rev.AsInt64OK()
	d.data, okData = binaryOK(f.data)
	d.mac, okMAC = binaryOK(f.mac)
	d.createdAt, okC = dateOK(f.createdAt)
	d.updatedAt, okU = dateOK(f.updatedAt)
	d.expiresAt, okE = dateOK(f.expiresAt)
	d.owner, _ = f.owner.StringValueOK()
	if version == format2 {
		d.lineage, _ = f.lineage.StringValueOK()
	}
	return d, errors.Join(get(fieldVersion, ok), get(fieldID, okID), get(fieldSID, okSID), get(fieldRev, okRev),
		get(fieldData, okData), get(fieldMAC, okMAC), get(fieldCreatedAt, okC), get(fieldUpdatedAt, okU),
		get(fieldExpiresAt, okE), get(fieldMaxAge, okAge))
}

// documentFields are the values of the fields a session document is read
// from, each the first of its name (as bson.Raw.Lookup finds it).
type documentFields struct {
	version, id, sid, rev, data, mac, createdAt, updatedAt, expiresAt, maxAge, owner, lineage bson.RawValue
}

// fieldsOf reads raw, a valid document, in one pass (a Lookup of each field
// would scan it from the start).
func fieldsOf(raw bson.Raw) documentFields {
	var f documentFields
	for rest := raw[4 : len(raw)-1]; len(rest) > 0; {
		e, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			break
		}
		if v := f.field(string(e.KeyBytes())); v != nil && v.Type == 0 {
			*v = bson.RawValue{Type: bson.Type(e[0]), Value: e.Value().Data}
		}
		rest = next
	}
	return f
}

// field returns where f keeps the field called name, or nil.
func (f *documentFields) field(name string) *bson.RawValue {
	switch name {
	case fieldVersion:
		return &f.version
	case fieldID:
		return &f.id
	case fieldSID:
		return &f.sid
	case fieldRev:
		return &f.rev
	case fieldData:
		return &f.data
	case fieldMAC:
		return &f.mac
	case fieldCreatedAt:
		return &f.createdAt
	case fieldUpdatedAt:
		return &f.updatedAt
	case fieldExpiresAt:
		return &f.expiresAt
	case fieldMaxAge:
		return &f.maxAge
	case fieldOwner:
		return &f.owner
	case fieldLineage:
		return &f.lineage
	}
	return nil
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
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 320+len(d.data)))
	b = d.appendFields(bsoncore.AppendStringElement(b, fieldID, d.id))
	b, _ = bsoncore.AppendDocumentEnd(b, i)
	return b
}

// appendFields appends the document's fields but _id to b.
func (d *document) appendFields(b []byte) []byte {
	b = bsoncore.AppendInt32Element(b, fieldVersion, formatVersion)
	b = bsoncore.AppendStringElement(b, fieldSID, d.sid)
	b = bsoncore.AppendInt64Element(b, fieldRev, d.rev)
	b = bsoncore.AppendBinaryElement(b, fieldData, bson.TypeBinaryGeneric, d.data)
	b = bsoncore.AppendBinaryElement(b, fieldMAC, bson.TypeBinaryGeneric, d.mac)
	b = bsoncore.AppendDateTimeElement(b, fieldCreatedAt, d.createdAt.UnixMilli())
	b = bsoncore.AppendDateTimeElement(b, fieldUpdatedAt, d.updatedAt.UnixMilli())
	b = bsoncore.AppendDateTimeElement(b, fieldExpiresAt, d.expiresAt.UnixMilli())
	b = bsoncore.AppendInt64Element(b, fieldMaxAge, int64(d.maxAge))
	if d.owner != "" { // no field, and no index entry, without an owner
		b = bsoncore.AppendStringElement(b, fieldOwner, d.owner)
	}
	return b
}

// update returns the update that makes the document at version v d: its
// fields set, an owner it no longer has and format 2's lineage unset.
func (d *document) update(v version) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 320+len(d.data)))
	j, b := bsoncore.AppendDocumentElementStart(b, "$set")
	b, _ = bsoncore.AppendDocumentEnd(d.appendFields(b), j)
	if (v.owned && d.owner == "") || v.format == format2 {
		j, b = bsoncore.AppendDocumentElementStart(b, "$unset")
		if v.owned && d.owner == "" {
			b = bsoncore.AppendStringElement(b, fieldOwner, "")
		}
		if v.format == format2 {
			b = bsoncore.AppendStringElement(b, fieldLineage, "")
		}
		b, _ = bsoncore.AppendDocumentEnd(b, j)
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
	format    int64
	owned     bool // the document has an owner field
	expiresAt time.Time
}

// version returns the version of d.
func (d *document) version() version {
	return version{rev: d.rev, format: d.format, owned: d.owner != "", expiresAt: d.expiresAt}
}

// idFilter returns {_id: id}.
func idFilter(id string) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 16+len(id)))
	b, _ = bsoncore.AppendDocumentEnd(bsoncore.AppendStringElement(b, fieldID, id), i)
	return b
}

// revFilter returns {_id: id, rev: rev}: one version of one document.
func revFilter(id string, rev int64) bson.Raw {
	i, b := bsoncore.AppendDocumentStart(make([]byte, 0, 32+len(id)))
	b = bsoncore.AppendInt64Element(bsoncore.AppendStringElement(b, fieldID, id), fieldRev, rev)
	b, _ = bsoncore.AppendDocumentEnd(b, i)
	return b
}

// collection sends the store's commands. Reads go to the primary, whatever
// the client's default: a request reads what the last one wrote. Writes
// use the client's write concern. Errors wrap ErrDatabase.
type collection struct {
	c        *mongo.Collection
	locks    *chainLocks   // one write of a chain at a time in this process
	atomic   *atomic.Int32 // atomicUnknown until atomicWrites asks the server
	ownedCap int           // how many sessions a listing of an owner's keeps: maxOwned, lower in tests
}

// What atomicWrites found.
const (
	atomicUnknown = iota
	atomicYes     // a conditional update or delete is one atomic step
	atomicNo      // FerretDB v1: it reads, then writes
)

func newCollection(c *mongo.Collection) collection {
	return collection{c: c.Clone(options.Collection().SetReadPreference(readpref.Primary())), locks: &chainLocks{},
		atomic: new(atomic.Int32), ownedCap: maxOwned}
}

// atomicWrites reports whether the server's conditional writes are atomic
// across processes: not on FerretDB v1, which answers buildInfo with a
// ferretdbVersion field. A server that refuses buildInfo is taken to be
// MongoDB.
func (c collection) atomicWrites(ctx context.Context) (bool, error) {
	if kind := c.atomic.Load(); kind != atomicUnknown {
		return kind == atomicYes, nil
	}
	raw, err := c.c.Database().RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil && !setup.Unsupported(err) {
		return false, dbError("buildInfo", err)
	}
	kind := int32(atomicYes)
	if setup.ParseBuildInfo(raw).ExactIDOnly() {
		kind = atomicNo
	}
	c.atomic.Store(kind)
	return kind == atomicYes, nil
}

// lockNonAtomic takes chain's lock where the server's writes read, then
// write by _id (FerretDB v1): there a release of a session's lock or a
// delete could undo a save of this process. Elsewhere it takes none.
func (c collection) lockNonAtomic(ctx context.Context, chain string) (func(), error) {
	if c.atomic.Load() == atomicYes {
		return func() {}, nil
	}
	return c.locks.lock(ctx, chain)
}

// errUnacknowledged is the error of a write the server did not acknowledge
// (write concern w=0): the store must know what each write did.
var errUnacknowledged = fmt.Errorf("%w: the collection's write concern is unacknowledged (w=0), but the store must know "+
	"what each write did (a concurrent save, a session already ended): use w=1 or w=majority", ErrInvalidConfig)

// writesAcknowledged reports whether the collection's writes are
// acknowledged (its write concern is not w=0), by an update that matches
// nothing.
func (c collection) writesAcknowledged(ctx context.Context) (bool, error) {
	res, err := c.c.UpdateOne(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: bson.A{}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldRev, Value: int64(0)}}}})
	if err != nil {
		return false, dbError("check the write concern", err)
	}
	return res.Acknowledged, nil
}

// acknowledged returns errUnacknowledged for a write not acknowledged.
func acknowledged(ok bool) error {
	if !ok {
		return errUnacknowledged
	}
	return nil
}

func dbError(op string, err error) error { return fmt.Errorf("%w: %s: %w", ErrDatabase, op, err) }

// uncertain reports whether err leaves a write's outcome unknown: a
// timeout or a network failure, after which the server may still run it.
func uncertain(err error) bool { return mongo.IsTimeout(err) || mongo.IsNetworkError(err) }

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
	res, err := c.c.InsertOne(ctx, d.raw())
	if err != nil {
		return dbError("insert session", err)
	}
	return acknowledged(res.Acknowledged)
}

// update makes the document d.id d if it is still at version v, live at
// now, and returns nil. If another write changed it since, it returns the
// document as that write left it. A document no longer live gives
// ErrSessionGone: it is never inserted again. A rev names one version, and
// v says when that one expires: past it, only a version another save wrote
// can take this one.
func (c collection) update(ctx context.Context, d *document, v version, now time.Time) (bson.Raw, error) {
	if v.expiresAt.After(now) {
		res, err := c.c.UpdateOne(ctx, revFilter(d.id, v.rev), d.update(v))
		if err != nil {
			return nil, dbError("save session", err)
		} else if err := acknowledged(res.Acknowledged); err != nil {
			return nil, err
		}
		if res.MatchedCount > 0 {
			return nil, nil
		}
	}
	raw, err := c.find(ctx, d.id)
	switch {
	case err != nil:
		return nil, err
	case raw == nil || !live(raw, now):
		return nil, ErrSessionGone
	}
	return raw, nil
}

// maxDeleteLooks bounds how often a delete looks again for a document that
// a concurrent write kept.
const maxDeleteLooks = 8

// delete deletes the document id, and says whether this command deleted
// it, looking again as deleteLooking does.
func (c collection) delete(ctx context.Context, id string) (bool, error) {
	return c.deleteMatching(ctx, id, idFilter(id))
}

// deleteOwned is delete of the document id while its owner digest is one
// of owners: a session tied to another owner since it was listed stays.
func (c collection) deleteOwned(ctx context.Context, id string, owners []string) (bool, error) {
	return c.deleteMatching(ctx, id, append(bson.D{{Key: fieldID, Value: id}}, ownedFilter(owners)...))
}

// deleteMatching deletes the document id if filter, which names it,
// matches it, looking again as deleteLooking does.
func (c collection) deleteMatching(ctx context.Context, id string, filter any) (bool, error) {
	return c.deleteLooking(ctx, id, func() (bool, error) {
		res, err := c.c.DeleteOne(ctx, filter)
		if err != nil {
			return false, dbError("delete session", err)
		}
		return res.DeletedCount > 0, acknowledged(res.Acknowledged)
	}, c.present(ctx, filter))
}

// present returns a check of whether filter matches a document.
func (c collection) present(ctx context.Context, filter any) func() (bool, error) {
	return func() (bool, error) {
		raw, err := c.c.FindOne(ctx, filter).Raw()
		raw, err = oneOrNone("delete session", raw, err)
		return raw != nil, err
	}
}

// remove deletes the document id whose secret's hash is sid (a document of
// formats 1 and 2 has none: its _id is that hash), and returns it, or nil
// if this command deleted none, looking again as deleteLooking does.
func (c collection) remove(ctx context.Context, id, sid string) (bson.Raw, error) {
	return c.removeMatching(ctx, id, bson.D{{Key: fieldID, Value: id}, ownSecret(sid)})
}

// take deletes the document id, whatever its secret, and returns it as it
// was deleted, or nil if this command deleted none, looking again as
// deleteLooking does.
func (c collection) take(ctx context.Context, id string) (bson.Raw, error) {
	return c.removeMatching(ctx, id, idFilter(id))
}

// removeMatching deletes the document id if filter, which names it,
// matches it, and returns it, or nil if this command deleted none.
func (c collection) removeMatching(ctx context.Context, id string, filter any) (bson.Raw, error) {
	var removed bson.Raw
	_, err := c.deleteLooking(ctx, id, func() (bool, error) {
		res := c.c.FindOneAndDelete(ctx, filter)
		raw, err := res.Raw()
		if removed, err = oneOrNone("delete session", raw, err); err == nil {
			err = acknowledged(res.Acknowledged)
		}
		return removed != nil, err
	}, c.present(ctx, filter))
	return removed, err
}

// deleteLooking runs del, a delete of the document id that says whether it
// deleted it, under the document's per-process lock. Where the server
// answers none deleted while a concurrent update of it commits
// (DocumentDB), present says whether it is still there, and del runs again.
func (c collection) deleteLooking(ctx context.Context, id string, del, present func() (bool, error)) (bool, error) {
	unlock, err := c.locks.lock(ctx, id)
	if err != nil {
		return false, err
	}
	defer unlock()
	for range maxDeleteLooks {
		if deleted, err := del(); deleted || err != nil {
			return deleted, err
		}
		if there, err := present(); !there || err != nil {
			return false, err
		}
	}
	return false, dbError("delete session", errors.New("the session kept being written while it was deleted"))
}

// ownSecret matches a document whose secret's hash is sid, or that has
// none (formats 1 and 2, whose _id is that hash).
func ownSecret(sid string) bson.E {
	return bson.E{Key: "$or", Value: bson.A{bson.D{{Key: fieldSID, Value: sid}}, bson.D{{Key: fieldSID, Value: bson.D{{Key: "$exists", Value: false}}}}}}
}

// acquire takes the lock of the document id, live at now, of the secret
// whose hash is sid, and not locked, for holder until until, and returns
// the document; nil if another holds it, or it is gone. maybeTaken says
// that the command failed with its outcome unknown (a timeout, a network
// failure, ctx done while it ran): the server may hold the lock. FerretDB
// v1's findAndModify reads, then writes: one runs at a time in this process.
func (c collection) acquire(ctx context.Context, id, sid, holder string, now, until time.Time) (_ bson.Raw, maybeTaken bool, _ error) {
	unlock, err := c.locks.lock(ctx, id)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	free := bson.A{bson.D{{Key: fieldLockUntil, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: fieldLockUntil, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}}}}
	filter := bson.D{{Key: fieldID, Value: id}, {Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}},
		{Key: "$and", Value: bson.A{bson.D{{Key: "$or", Value: free}}, bson.D{ownSecret(sid)}}}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: fieldLock, Value: holder}, {Key: fieldLockUntil, Value: bson.NewDateTimeFromTime(until)}}}}
	raw, err := c.c.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
	raw, err = oneOrNone("lock session", raw, err)
	return raw, err != nil && (uncertain(err) || ctx.Err() != nil), err
}

// release releases holder's lock of the document id, if it still holds it.
func (c collection) release(ctx context.Context, id, holder string) error {
	unlock, err := c.lockNonAtomic(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	filter := bson.D{{Key: fieldID, Value: id}, {Key: fieldLock, Value: holder}}
	if _, err := c.c.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{{Key: fieldLock, Value: ""}, {Key: fieldLockUntil, Value: ""}}}}); err != nil {
		return dbError("unlock session", err)
	}
	return nil
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
	return res.DeletedCount, acknowledged(res.Acknowledged)
}

// expiredFilter matches the documents expired at now: an index range.
func expiredFilter(now time.Time) bson.D {
	return bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}}}
}

// deleteExpired deletes every document expired at now.
func (c collection) deleteExpired(ctx context.Context, now time.Time) (int64, error) {
	return c.deleteMany(ctx, "delete expired sessions", expiredFilter(now), sweepComment)
}

// deleteExpiredIn deletes those of docs, read expired, that are expired
// at now: one command, under their chains' locks where the server's delete
// reads, then deletes by _id (FerretDB v1).
func (c collection) deleteExpiredIn(ctx context.Context, docs []bson.Raw, now time.Time) (int64, error) {
	ids, chains := make(bson.A, 0, len(docs)), make([]string, 0, len(docs))
	for _, raw := range docs {
		id := raw.Lookup(fieldID)
		ids = append(ids, id)
		if chain, ok := id.StringValueOK(); ok {
			chains = append(chains, chain)
		}
	}
	unlock, err := c.locks.lockAll(ctx, chains)
	if err != nil {
		return 0, err
	}
	defer unlock()
	filter := append(expiredFilter(now), bson.E{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}})
	return c.deleteMany(ctx, "delete expired sessions", filter, sweepComment)
}

// findExpired returns up to limit documents expired at now, whole or
// their _id only.
func (c collection) findExpired(ctx context.Context, now time.Time, limit int, whole bool) ([]bson.Raw, error) {
	opts := options.Find().SetLimit(int64(limit)).SetComment(sweepComment)
	if !whole {
		opts.SetProjection(bson.D{{Key: fieldID, Value: 1}})
	}
	cur, err := c.c.Find(ctx, expiredFilter(now), opts)
	if err != nil {
		return nil, dbError("find expired sessions", err)
	}
	return all(ctx, cur, "find expired sessions", limit, func(bson.Raw) bool { return true })
}

// deleteExpiredOne deletes the document id if it is expired at now or
// still at revision rev, and says whether it did.
func (c collection) deleteExpiredOne(ctx context.Context, id bson.RawValue, rev int64, now time.Time) (bool, error) {
	if chain, ok := id.StringValueOK(); ok {
		unlock, err := c.lockNonAtomic(ctx, chain)
		if err != nil {
			return false, err
		}
		defer unlock()
	}
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

// findOwned passes use the sessions live at now whose owner digest is one
// of owners, from the owner index, until use has taken c.ownedCap of them,
// and reports whether it passed them all (use took fewer). It reads past
// the expired ones that the TTL monitor or the GC has not deleted yet, and
// past those use refuses (unreadable ones): none hides the rest. Each
// document comes once: DocumentDB can return one twice from an index whose
// entries for it changed a moment before.
func (c collection) findOwned(ctx context.Context, owners []string, now time.Time, use func(bson.Raw) bool) (bool, error) {
	cur, err := c.c.Find(ctx, ownedFilter(owners))
	if err != nil {
		return false, dbError("list sessions", err)
	}
	seen := map[string]bool{}
	taken, err := all(ctx, cur, "list sessions", c.ownedCap, func(doc bson.Raw) bool {
		id, _ := doc.Lookup(fieldID).StringValueOK()
		first := !seen[id]
		seen[id] = true
		return first && live(doc, now) && use(doc)
	})
	return err == nil && len(taken) < c.ownedCap, err
}

// all reads the documents of cur that keep says to keep, at most limit;
// keep gets each one's own copy.
func all(ctx context.Context, cur *mongo.Cursor, op string, limit int, keep func(bson.Raw) bool) ([]bson.Raw, error) {
	var docs []bson.Raw
	for len(docs) < limit && cur.Next(ctx) {
		if doc := bson.Raw(bytes.Clone(cur.Current)); keep(doc) {
			docs = append(docs, doc)
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
