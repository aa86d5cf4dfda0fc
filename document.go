package mongostore

import (
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Field names of a session document.
const (
	fieldID        = "_id"       // hex SHA-256 (or HMAC) of the session ID
	fieldData      = "data"      // codec-encoded session values (binary)
	fieldCreatedAt = "createdAt" // when the session was first saved
	fieldUpdatedAt = "updatedAt" // when it was last saved
	fieldExpiresAt = "expiresAt" // when it expires: idle and absolute timeouts applied
)

// storedSession is the part of a session document the store reads back.
type storedSession struct {
	data      []byte
	createdAt time.Time
	updatedAt time.Time
	expiresAt time.Time
}

var errMalformedDocument = errors.New("malformed session document")

// decodeDocument parses a raw session document. It never panics, whatever
// the bytes: documents may have been written by something other than this
// store.
func decodeDocument(raw []byte) (storedSession, error) {
	var s storedSession
	doc := bson.Raw(raw)
	if err := doc.Validate(); err != nil {
		return s, fmt.Errorf("%w: %w", errMalformedDocument, err)
	}
	data, err := doc.LookupErr(fieldData)
	if err != nil {
		return s, fmt.Errorf("%w: no %s field", errMalformedDocument, fieldData)
	}
	subtype, bin, ok := data.BinaryOK()
	if !ok || subtype != bson.TypeBinaryGeneric {
		return s, fmt.Errorf("%w: %s is not generic binary", errMalformedDocument, fieldData)
	}
	s.data = bin
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

// newDocument builds the document inserted for a new session.
func newDocument(docID string, data []byte, now, expiresAt time.Time) bson.D {
	return bson.D{
		{Key: fieldID, Value: docID},
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: data}},
		{Key: fieldCreatedAt, Value: bsonDate(now)},
		{Key: fieldUpdatedAt, Value: bsonDate(now)},
		{Key: fieldExpiresAt, Value: bsonDate(expiresAt)},
	}
}

// idFilter matches the document docID.
func idFilter(docID string) bson.D { return bson.D{{Key: fieldID, Value: docID}} }

// liveFilter matches the document docID if it has not expired at now.
func liveFilter(docID string, now time.Time) bson.D {
	return bson.D{
		{Key: fieldID, Value: docID},
		{Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bsonDate(now)}}},
	}
}

// updateDocument sets new values and a new expiry on an existing session.
func updateDocument(data []byte, now, expiresAt time.Time) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: data}},
		{Key: fieldUpdatedAt, Value: bsonDate(now)},
		{Key: fieldExpiresAt, Value: bsonDate(expiresAt)},
	}}}
}
