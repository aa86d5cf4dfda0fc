package mongostore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Field names of a session document.
const (
	fieldID        = "_id"       // hex SHA-256 (or HMAC) of the session ID
	fieldData      = "data"      // codec-encoded session values (binary)
	fieldMAC       = "mac"       // HMAC-SHA256 of _id, createdAt, expiresAt and data (binary), checked before decoding
	fieldCreatedAt = "createdAt" // when the session was first saved
	fieldUpdatedAt = "updatedAt" // when it was last saved
	fieldExpiresAt = "expiresAt" // when it expires: idle and absolute timeouts applied
)

// storedSession is the part of a session document the store reads back.
type storedSession struct {
	data      []byte
	mac       []byte
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
	mac, err := doc.LookupErr(fieldMAC)
	if err != nil {
		return s, fmt.Errorf("%w: no %s field", errMalformedDocument, fieldMAC)
	}
	if subtype, s.mac, ok = mac.BinaryOK(); !ok || subtype != bson.TypeBinaryGeneric {
		return s, fmt.Errorf("%w: %s is not generic binary", errMalformedDocument, fieldMAC)
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
func newDocument(docID string, data, mac []byte, now, expiresAt time.Time) bson.D {
	return bson.D{
		{Key: fieldID, Value: docID},
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: data}},
		{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: mac}},
		{Key: fieldCreatedAt, Value: bsonDate(now)},
		{Key: fieldUpdatedAt, Value: bsonDate(now)},
		{Key: fieldExpiresAt, Value: bsonDate(expiresAt)},
	}
}

// idFilter matches the document docID.
func idFilter(docID string) bson.D { return bson.D{{Key: fieldID, Value: docID}} }

// expiredFilter matches the documents that have expired at now.
func expiredFilter(now time.Time) bson.D {
	return bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bsonDate(now)}}}}
}

// preImage makes findAndModify return the document as it was before the
// update. It is the whole document: FerretDB v1 refuses a projection there.
func preImage() *options.FindOneAndUpdateOptionsBuilder {
	return options.FindOneAndUpdate().SetReturnDocument(options.Before)
}

// live reports whether a document (or its projection to expiresAt) has not
// expired at now. A document without a date in expiresAt was not written
// by the store and counts as expired.
func live(doc bson.Raw, now time.Time) bool {
	ms, ok := doc.Lookup(fieldExpiresAt).DateTimeOK()
	return ok && time.UnixMilli(ms).After(now)
}

// updateDocument sets new values and a new expiry on an existing session.
func updateDocument(data, mac []byte, now, expiresAt time.Time) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: data}},
		{Key: fieldMAC, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: mac}},
		{Key: fieldUpdatedAt, Value: bsonDate(now)},
		{Key: fieldExpiresAt, Value: bsonDate(expiresAt)},
	}}}
}

// macKeyLabel separates the document MAC keys from the cookie keys they are
// derived from.
const macKeyLabel = "mongostore v1 document MAC"

// dataSealer authenticates stored session data and times. Session values are decoded
// only after their MAC checks out, so bytes written to the collection by
// anyone without the app's keys (a compromised or shared database, a
// restored foreign backup) never reach the codec: encoding/gob is not
// hardened against hostile input, and a few bytes can make it allocate
// without bound.
type dataSealer struct {
	keys [][]byte // the first signs; all verify (key rotation)
}

// newDataSealer derives one MAC key from each cookie hash key.
func newDataSealer(hashKeys [][]byte) dataSealer {
	keys := make([][]byte, len(hashKeys))
	for i, k := range hashKeys {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(macKeyLabel))
		keys[i] = m.Sum(nil)
	}
	return dataSealer{keys: keys}
}

func sealWith(key []byte, docID string, createdAt, expiresAt time.Time, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	var buf [24]byte
	binary.BigEndian.PutUint64(buf[0:], uint64(len(docID)))
	binary.BigEndian.PutUint64(buf[8:], uint64(createdAt.UnixMilli()))
	binary.BigEndian.PutUint64(buf[16:], uint64(expiresAt.UnixMilli()))
	m.Write(buf[:8])
	m.Write([]byte(docID))
	m.Write(buf[8:])
	m.Write(data)
	return m.Sum(nil)
}

// seal returns the MAC of a document: its _id, creation and expiry times
// (as BSON stores them, in milliseconds) and data.
func (d dataSealer) seal(docID string, createdAt, expiresAt time.Time, data []byte) []byte {
	return sealWith(d.keys[0], docID, createdAt, expiresAt, data)
}

// verify reports whether mac authenticates the document with any of the
// keys.
func (d dataSealer) verify(docID string, createdAt, expiresAt time.Time, data, mac []byte) bool {
	for _, k := range d.keys {
		if hmac.Equal(mac, sealWith(k, docID, createdAt, expiresAt, data)) {
			return true
		}
	}
	return false
}
