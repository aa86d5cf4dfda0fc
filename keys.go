package mongostore

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"time"

	"github.com/gorilla/securecookie"
)

// This file holds every secret the store derives or checks: session IDs
// and their hashes, the cookie codecs, and the keys of the document MAC.

// idBytes is the number of random bytes in a session ID (256 bits).
const idBytes = 32

// idEncoding encodes session IDs for cookies.
var idEncoding = base64.RawURLEncoding

// idLength is the length of an encoded session ID.
var idLength = idEncoding.EncodedLen(idBytes)

// newSessionID returns a fresh session ID: 32 bytes from crypto/rand,
// base64url-encoded without padding (43 characters).
func newSessionID() string {
	b := make([]byte, idBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+): it crashes the program instead.
	return idEncoding.EncodeToString(b)
}

// validSessionID reports whether id has the form newSessionID produces.
func validSessionID(id string) bool {
	if len(id) != idLength {
		return false
	}
	b, err := idEncoding.Strict().DecodeString(id)
	return err == nil && len(b) == idBytes
}

// idHasher turns session IDs into document IDs. The database only ever sees
// the hash, so a leaked dump or an index probe yields no usable session ID.
type idHasher struct {
	key []byte // nil: plain SHA-256; otherwise HMAC-SHA256 with this key
}

// docID returns the document _id for a session ID: the hex-encoded SHA-256
// (or HMAC-SHA256) of it.
func (h idHasher) docID(sessionID string) string {
	var sum [sha256.Size]byte
	if h.key == nil {
		sum = sha256.Sum256([]byte(sessionID))
	} else {
		var m hash.Hash = hmac.New(sha256.New, h.key)
		m.Write([]byte(sessionID))
		m.Sum(sum[:0])
	}
	return hex.EncodeToString(sum[:])
}

// newCookieCodecs validates the key pairs and builds the cookie codecs. It
// also returns the pairs' hash keys, from which the document MAC keys are
// derived.
func newCookieCodecs(keyPairs [][]byte) ([]securecookie.Codec, [][]byte, error) {
	if len(keyPairs) == 0 {
		return nil, nil, fmt.Errorf("%w: no keys: give at least a hash key", ErrInvalidConfig)
	}
	codecs := make([]securecookie.Codec, 0, (len(keyPairs)+1)/2)
	hashKeys := make([][]byte, 0, cap(codecs))
	for i := 0; i < len(keyPairs); i += 2 {
		hashKey := keyPairs[i]
		if len(hashKey) < minKeyLength {
			return nil, nil, fmt.Errorf("%w: hash key %d has %d bytes, want at least %d", ErrInvalidConfig, i/2, len(hashKey), minKeyLength)
		}
		var blockKey []byte
		if i+1 < len(keyPairs) && len(keyPairs[i+1]) > 0 {
			blockKey = keyPairs[i+1]
			switch len(blockKey) {
			case 16, 24, 32:
			default:
				return nil, nil, fmt.Errorf("%w: block key %d has %d bytes, want 16, 24 or 32", ErrInvalidConfig, i/2, len(blockKey))
			}
		}
		c := securecookie.New(hashKey, blockKey)
		c.SetSerializer(securecookie.NopEncoder{})
		c.MaxLength(defaultCookieMaxLength)
		// No check of the cookie's signed timestamp: the document's expiresAt
		// decides when a session ends, and a per-session MaxAge may be longer
		// than any store-wide bound (gorilla's stores cut such sessions short).
		c.MaxAge(0)
		codecs = append(codecs, c)
		hashKeys = append(hashKeys, hashKey)
	}
	return codecs, hashKeys, nil
}

// Document MAC keys. Each cookie hash key gives one MAC key per document
// format version:
//
//   - version 1 (documents without a "v" field, written before format
//     versions existed): HMAC-SHA256(hash key, "mongostore v1 document MAC");
//   - version 2: HKDF-SHA256 of the hash key, info "mongostore document MAC v2".
const (
	macKeyLabelV1 = "mongostore v1 document MAC"
	macKeyInfoV2  = "mongostore document MAC v2"
)

// sealedFields are the fields of a session document that its MAC covers.
type sealedFields struct {
	version   int
	docID     string
	createdAt time.Time
	updatedAt time.Time // covered from version 2 on
	expiresAt time.Time
	data      []byte
}

// dataSealer authenticates stored session documents. Session values are
// decoded only after their MAC checks out, so bytes written to the
// collection by anyone without the app's keys (a compromised or shared
// database, a restored foreign backup) never reach the codec:
// encoding/gob is not hardened against hostile input, and a few bytes can
// make it allocate without bound. The MAC also covers the times the store
// trusts (created, updated, expires), so moving one in the database makes
// the document unreadable rather than longer-lived.
type dataSealer struct {
	keys   [][]byte // version 2: the first signs; all verify (key rotation)
	keysV1 [][]byte // version 1, to verify documents written before version 2
}

// newDataSealer derives the MAC keys from the cookie hash keys.
func newDataSealer(hashKeys [][]byte) (*dataSealer, error) {
	d := &dataSealer{}
	for _, k := range hashKeys {
		v2, err := hkdf.Key(sha256.New, k, nil, macKeyInfoV2, sha256.Size)
		if err != nil {
			return nil, fmt.Errorf("%w: derive the document MAC key: %w", ErrInvalidConfig, err)
		}
		m := hmac.New(sha256.New, k)
		m.Write([]byte(macKeyLabelV1))
		d.keys = append(d.keys, v2)
		d.keysV1 = append(d.keysV1, m.Sum(nil))
	}
	return d, nil
}

// mac computes the MAC of f with key, in f's format version.
func mac(key []byte, f sealedFields) []byte {
	m := hmac.New(sha256.New, key)
	var buf [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(buf[:], v)
		m.Write(buf[:])
	}
	if f.version >= 2 {
		put(uint64(f.version))
	}
	put(uint64(len(f.docID)))
	m.Write([]byte(f.docID))
	put(uint64(f.createdAt.UnixMilli()))
	if f.version >= 2 {
		put(uint64(f.updatedAt.UnixMilli()))
	}
	put(uint64(f.expiresAt.UnixMilli()))
	m.Write(f.data)
	return m.Sum(nil)
}

// seal returns the MAC of a document written now, in the current format
// version (which it sets in f).
func (d *dataSealer) seal(f *sealedFields) []byte {
	f.version = documentVersion
	return mac(d.keys[0], *f)
}

// verify reports whether sum authenticates f with any of the keys of f's
// format version.
func (d *dataSealer) verify(f sealedFields, sum []byte) bool {
	keys := d.keys
	switch f.version {
	case 1:
		keys = d.keysV1
	case documentVersion:
	default:
		return false
	}
	for _, k := range keys {
		if hmac.Equal(sum, mac(k, f)) {
			return true
		}
	}
	return false
}
