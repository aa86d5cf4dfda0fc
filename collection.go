package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file is the store's whole database surface: the document schema, the
// filters, and every command the store sends, each in its own method.
// Every command of a request filters on exactly {_id: …}: FerretDB v1
// answers no other shape without decoding the whole collection.

// Field names of a session document.
const (
	fieldID        = "_id"       // hex SHA-256 (or HMAC) of the session ID
	fieldVersion   = "v"         // format version; absent in version 1
	fieldData      = "data"      // codec-encoded session values (binary)
	fieldMAC       = "mac"       // HMAC-SHA256 of the fields the store trusts (binary), checked before decoding
	fieldCreatedAt = "createdAt" // when the session was first saved
	fieldUpdatedAt = "updatedAt" // when it was last saved
	fieldExpiresAt = "expiresAt" // when it expires: idle and absolute timeouts applied
	// Present only on sessions tied to an owner (SetOwner), for the owner
	// index: a keyed digest of the owner (see dataSealer.ownerDigest), never
	// the owner itself. The owner and the device label live in data, under
	// the MAC (and the encryption, with a block key); the store trusts a
	// document's owner only once data agrees.
	fieldOwner = "owner"
)

// ownerIndexName is the name of the sparse index {owner: 1}.
const ownerIndexName = fieldOwner + "_1"

// documentVersion is the format version of the documents the store writes:
//
//   - 1 (no "v" field): data holds Config.Codec's bytes (GobCodec by
//     default); the MAC covers _id, createdAt, expiresAt and data;
//   - 2: the MAC key comes from HKDF and the MAC covers updatedAt and the
//     version too;
//   - 3: data is an envelope (see dataSealer.wrap), encrypted when the
//     application gives a block key, around Config.Codec's bytes (now
//     CompactCodec by default).
//
// Older documents are read, and rewritten as the current version at their
// next save.
const documentVersion = 3

// storedSession is a session document as the store reads it back.
type storedSession struct {
	sealedFields
	mac []byte
}

var errMalformedDocument = errors.New("malformed session document")

// decodeDocument parses a raw session document stored under docID. It
// never panics, whatever the bytes: documents may have been written by
// something other than this store.
func decodeDocument(docID string, raw []byte) (storedSession, error) {
	s := storedSession{sealedFields: sealedFields{docID: docID, version: 1}}
	doc := bson.Raw(raw)
	if err := doc.Validate(); err != nil {
		return s, fmt.Errorf("%w: %w", errMalformedDocument, err)
	}
	if v, err := doc.LookupErr(fieldVersion); err == nil {
		n, ok := v.AsInt64OK()
		if !ok || n < 2 || n > documentVersion {
			return s, fmt.Errorf("%w: unknown format version %v", errMalformedDocument, v)
		}
		s.version = int(n)
	}
	var err error
	if s.data, err = lookupBinary(doc, fieldData); err != nil {
		return s, err
	}
	if s.mac, err = lookupBinary(doc, fieldMAC); err != nil {
		return s, err
	}
	if s.createdAt, err = lookupTime(doc, fieldCreatedAt); err != nil {
		return s, err
	}
	if s.updatedAt, err = lookupTime(doc, fieldUpdatedAt); err != nil {
		return s, err
	}
	if s.expiresAt, err = lookupTime(doc, fieldExpiresAt); err != nil {
		return s, err
	}
	return s, nil
}

func lookupBinary(doc bson.Raw, field string) ([]byte, error) {
	v, err := doc.LookupErr(field)
	if err != nil {
		return nil, fmt.Errorf("%w: no %s field", errMalformedDocument, field)
	}
	subtype, bin, ok := v.BinaryOK()
	if !ok || subtype != bson.TypeBinaryGeneric {
		return nil, fmt.Errorf("%w: %s is not generic binary", errMalformedDocument, field)
	}
	return bin, nil
}

func lookupTime(doc bson.Raw, field string) (time.Time, error) {
	v, err := doc.LookupErr(field)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: no %s field", errMalformedDocument, field)
	}
	ms, ok := v.DateTimeOK()
	if !ok {
		return time.Time{}, fmt.Errorf("%w: %s is not a date", errMalformedDocument, field)
	}
	return time.UnixMilli(ms), nil
}

// bsonDate converts t to a BSON date (millisecond precision).
func bsonDate(t time.Time) bson.DateTime { return bson.NewDateTimeFromTime(t) }

func binData(b []byte) bson.Binary { return bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: b} }

// ownerField returns the owner field of a document with the owner digest
// owner: none without an owner, which then costs nothing in the document or
// the sparse index.
func ownerField(owner string) bson.D {
	if owner == "" {
		return nil
	}
	return bson.D{{Key: fieldOwner, Value: owner}}
}

// newDocument builds the document inserted for a new session, sealed with
// mac, with the owner digest owner ("" for none).
func newDocument(f sealedFields, mac []byte, owner string) bson.D {
	return append(bson.D{
		{Key: fieldID, Value: f.docID},
		{Key: fieldVersion, Value: int32(f.version)},
		{Key: fieldData, Value: binData(f.data)},
		{Key: fieldMAC, Value: binData(mac)},
		{Key: fieldCreatedAt, Value: bsonDate(f.createdAt)},
		{Key: fieldUpdatedAt, Value: bsonDate(f.updatedAt)},
		{Key: fieldExpiresAt, Value: bsonDate(f.expiresAt)},
	}, ownerField(owner)...)
}

// updateDocument sets new values and times on an existing session, sealed
// with mac (which covers its unchanged createdAt too). owner is the
// session's owner digest now ("" for none), wasOwned whether the document
// has an owner field: the field is written when there is an owner, and
// removed when only the document had one, so a session that never had an
// owner gets the same command as before owners existed.
func updateDocument(f sealedFields, mac []byte, owner string, wasOwned bool) bson.D {
	set := append(bson.D{
		{Key: fieldVersion, Value: int32(f.version)},
		{Key: fieldData, Value: binData(f.data)},
		{Key: fieldMAC, Value: binData(mac)},
		{Key: fieldUpdatedAt, Value: bsonDate(f.updatedAt)},
		{Key: fieldExpiresAt, Value: bsonDate(f.expiresAt)},
	}, ownerField(owner)...)
	update := bson.D{{Key: "$set", Value: set}}
	if wasOwned && owner == "" {
		update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: fieldOwner, Value: ""}}})
	}
	return update
}

// idFilter matches the document docID.
func idFilter(docID string) bson.D { return bson.D{{Key: fieldID, Value: docID}} }

// liveFilter matches the document docID if it has not expired at now.
// Only a save to a session about to expire uses it: on FerretDB v1, any
// shape but exactly {_id} scans the collection.
func liveFilter(docID string, now time.Time) bson.D {
	return bson.D{{Key: fieldID, Value: docID}, {Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bsonDate(now)}}}}
}

// ownedFilter matches the sessions whose owner digest is one of owners
// (one per key pair, for key rotation), expired or not: the caller checks
// expiry. (With expiresAt in the filter, DocumentDB intersects the owner
// index with the expiresAt index's range of every live session: 0.8 s at a
// million sessions, against 1 ms for the owner alone.)
func ownedFilter(owners []string) bson.D {
	if len(owners) == 1 {
		return bson.D{{Key: fieldOwner, Value: owners[0]}}
	}
	return bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$in", Value: owners}}}}
}

// othersFilter matches what ownedFilter(owners) matches but the document
// except (all of it if except is "").
func othersFilter(owners []string, except string) bson.D {
	f := ownedFilter(owners)
	if except != "" {
		f = append(f, bson.E{Key: fieldID, Value: bson.D{{Key: "$ne", Value: except}}})
	}
	return f
}

// expiredFilter matches the documents that have expired at now.
func expiredFilter(now time.Time) bson.D {
	return bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bsonDate(now)}}}}
}

// malformedFilter matches the documents whose expiresAt is not a date (or
// is missing): written by something other than the store, they are never
// served, and neither a TTL index nor expiredFilter ever matches them.
func malformedFilter() bson.D {
	return bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}}
}

// live reports whether a document has not expired at now. A document
// without a date in expiresAt was not written by the store and counts as
// expired.
func live(doc bson.Raw, now time.Time) bool {
	ms, ok := doc.Lookup(fieldExpiresAt).DateTimeOK()
	return ok && time.UnixMilli(ms).After(now)
}

// collection issues the store's commands on its MongoDB collection. Errors
// wrap ErrDatabase and the driver's error.
type collection struct {
	c *mongo.Collection
}

func dbError(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrDatabase, op, err)
}

// oneOrNone turns the answer of a command that returns at most one
// document into that document, or nil if there was none.
func oneOrNone(op string) func(bson.Raw, error) (bson.Raw, error) {
	return func(doc bson.Raw, err error) (bson.Raw, error) {
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			return nil, nil
		case err != nil:
			return nil, dbError(op, err)
		}
		return doc, nil
	}
}

// find returns the document docID, or nil if there is none.
func (c collection) find(ctx context.Context, docID string) (bson.Raw, error) {
	return oneOrNone("load session")(c.c.FindOne(ctx, idFilter(docID)).Raw())
}

// insert inserts a new session document.
func (c collection) insert(ctx context.Context, doc bson.D) error {
	if _, err := c.c.InsertOne(ctx, doc); err != nil {
		return dbError("insert session", err)
	}
	return nil
}

// update applies change to the document docID, never inserting it, and
// returns the document as it was before (whole: FerretDB v1 refuses a
// projection in findAndModify), or nil if there was none. With a non-zero
// liveAt, only a document still live at liveAt is changed (liveFilter).
func (c collection) update(ctx context.Context, docID string, change bson.D, liveAt time.Time) (bson.Raw, error) {
	filter := idFilter(docID)
	if !liveAt.IsZero() {
		filter = liveFilter(docID, liveAt)
	}
	return oneOrNone("save session")(c.c.FindOneAndUpdate(ctx, filter, change,
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw())
}

// remove deletes the document docID and returns it, or nil if there was
// none.
func (c collection) remove(ctx context.Context, docID string) (bson.Raw, error) {
	return oneOrNone("delete session")(c.c.FindOneAndDelete(ctx, idFilter(docID)).Raw())
}

// delete deletes the document docID, if it exists.
func (c collection) delete(ctx context.Context, docID string) error {
	if _, err := c.c.DeleteOne(ctx, idFilter(docID)); err != nil {
		return dbError("delete session", err)
	}
	return nil
}

// deleteExpired deletes every document expired at now, in one command
// marked with GCComment, and returns how many it deleted.
func (c collection) deleteExpired(ctx context.Context, now time.Time) (int64, error) {
	res, err := c.c.DeleteMany(ctx, expiredFilter(now), options.DeleteMany().SetComment(GCComment))
	if err != nil {
		return 0, dbError("delete expired sessions", err)
	}
	return res.DeletedCount, nil
}

// maxOwned bounds how many sessions of one owner a listing reads.
const maxOwned = 1000

// findOwned returns the documents of the sessions whose owner digest is one
// of owners, at most maxOwned of them, from the owner index; some may have
// expired.
func (c collection) findOwned(ctx context.Context, owners []string) ([]bson.Raw, error) {
	cur, err := c.c.Find(ctx, ownedFilter(owners), options.Find().SetLimit(maxOwned))
	if err != nil {
		return nil, dbError("list sessions", err)
	}
	var docs []bson.Raw
	for cur.Next(ctx) {
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	if err := errors.Join(cur.Err(), cur.Close(ctx)); err != nil {
		return nil, dbError("list sessions", err)
	}
	return docs, nil
}

// deleteOwned deletes the document docID if its owner digest is owner, and
// says whether there was one.
func (c collection) deleteOwned(ctx context.Context, owner, docID string) (bool, error) {
	res, err := c.c.DeleteOne(ctx, bson.D{{Key: fieldID, Value: docID}, {Key: fieldOwner, Value: owner}})
	if err != nil {
		return false, dbError("end session", err)
	}
	return res.DeletedCount > 0, nil
}

// deleteOthers deletes what othersFilter(owners, except) matches, and
// returns how many it deleted.
func (c collection) deleteOthers(ctx context.Context, owners []string, except string) (int64, error) {
	res, err := c.c.DeleteMany(ctx, othersFilter(owners, except))
	if err != nil {
		return 0, dbError("end sessions", err)
	}
	return res.DeletedCount, nil
}

// createOwnerIndex creates the sparse index {owner: 1}: documents without
// an owner have no entry in it.
func (c collection) createOwnerIndex(ctx context.Context) error {
	_, err := c.c.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fieldOwner, Value: 1}},
		Options: options.Index().SetSparse(true).SetName(ownerIndexName),
	})
	if err != nil {
		return dbError("create index on "+fieldOwner, err)
	}
	return nil
}

// deleteMalformed deletes every document matched by malformedFilter, in
// one command marked with GCComment (a scan of the collection: no index
// holds the type of a field), and returns how many it deleted.
func (c collection) deleteMalformed(ctx context.Context) (int64, error) {
	res, err := c.c.DeleteMany(ctx, malformedFilter(), options.DeleteMany().SetComment(GCComment))
	if err != nil {
		return 0, dbError("delete sessions whose expiresAt is not a date", err)
	}
	return res.DeletedCount, nil
}

// indexSpecs returns the collection's index specifications (none if the
// collection does not exist yet).
func (c collection) indexSpecs(ctx context.Context) ([]bson.Raw, error) {
	cur, err := c.c.Indexes().List(ctx)
	if hasCode(err, codeNamespaceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, dbError("list indexes", err)
	}
	var specs []bson.Raw
	for cur.Next(ctx) {
		specs = append(specs, append(bson.Raw(nil), cur.Current...))
	}
	if err := errors.Join(cur.Err(), cur.Close(ctx)); err != nil {
		return nil, dbError("list indexes", err)
	}
	return specs, nil
}

// createExpiresAtIndex creates the index {expiresAt: 1}: with
// expireAfterSeconds 0 (a TTL index deleting each document at its
// expiresAt) if ttl, plain otherwise.
func (c collection) createExpiresAtIndex(ctx context.Context, ttl bool) error {
	opts := options.Index()
	if ttl {
		opts.SetExpireAfterSeconds(ttlExpireAfterSeconds)
	}
	_, err := c.c.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fieldExpiresAt, Value: 1}},
		Options: opts,
	})
	if err != nil {
		return dbError("create index on "+fieldExpiresAt, err)
	}
	return nil
}

// setTTL makes the index called name expire documents at their expiresAt
// (collMod, expireAfterSeconds 0).
func (c collection) setTTL(ctx context.Context, name string) error {
	err := c.c.Database().RunCommand(ctx, bson.D{
		{Key: "collMod", Value: c.c.Name()},
		{Key: "index", Value: bson.D{
			{Key: "name", Value: name},
			{Key: "expireAfterSeconds", Value: int64(ttlExpireAfterSeconds)},
		}},
	}).Err()
	if err != nil {
		return dbError("collMod", err)
	}
	return nil
}

// dropIndex drops the index called name; one already gone is fine.
func (c collection) dropIndex(ctx context.Context, name string) error {
	if err := c.c.Indexes().DropOne(ctx, name); err != nil && !hasCode(err, codeIndexNotFound) {
		return dbError("drop index", err)
	}
	return nil
}

// Server error codes the store recognises.
const (
	codeNamespaceNotFound   = 26
	codeIndexNotFound       = 27
	codeCommandNotFound     = 59
	codeCommandNotSupported = 115
	codeNotImplemented      = 238
)

// unsupported reports whether err says the server does not implement what
// was asked (FerretDB v1 answers NotImplemented to TTL indexes).
func unsupported(err error) bool {
	return hasCode(err, codeNotImplemented) || hasCode(err, codeCommandNotSupported) || hasCode(err, codeCommandNotFound)
}

func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
