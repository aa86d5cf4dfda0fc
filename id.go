package mongostore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
)

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
