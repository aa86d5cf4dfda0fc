package mongostore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
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
	macs *sync.Pool // nil: plain SHA-256; otherwise reusable HMAC-SHA256 states keyed with Config.IDHashKey
}

// newIDHasher returns the hasher for Config.IDHashKey (nil: plain SHA-256).
func newIDHasher(key []byte) idHasher {
	if key == nil {
		return idHasher{}
	}
	return idHasher{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// docID returns the document _id for a session ID: the hex-encoded SHA-256
// (or HMAC-SHA256) of it.
func (h idHasher) docID(sessionID string) string {
	var sum [sha256.Size]byte
	if h.macs == nil {
		sum = sha256.Sum256([]byte(sessionID))
	} else {
		m := h.macs.Get().(hash.Hash)
		m.Reset()
		m.Write([]byte(sessionID))
		m.Sum(sum[:0])
		h.macs.Put(m)
	}
	return hex.EncodeToString(sum[:])
}

// newCookieCodecs validates the key pairs and builds the cookie codecs. It
// also returns the pairs, from which the document keys are derived.
func newCookieCodecs(keyPairs [][]byte) ([]securecookie.Codec, []keyPair, error) {
	if len(keyPairs) == 0 {
		return nil, nil, fmt.Errorf("%w: no keys: give at least a hash key", ErrInvalidConfig)
	}
	codecs := make([]securecookie.Codec, 0, (len(keyPairs)+1)/2)
	pairs := make([]keyPair, 0, cap(codecs))
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
		pairs = append(pairs, keyPair{hash: hashKey, block: blockKey})
	}
	return codecs, pairs, nil
}

// keyPair is one of the application's key pairs: a hash key and an
// optional block key.
type keyPair struct{ hash, block []byte }

// Document keys. Each hash key gives one MAC key per document format
// version, and each block key an encryption key:
//
//   - MAC, version 1 (documents without a "v" field, written before format
//     versions existed): HMAC-SHA256(hash key, "mongostore v1 document MAC");
//   - MAC, versions 2 and 3: HKDF-SHA256 of the hash key, info
//     "mongostore document MAC v2";
//   - encryption (version 3): AES-256-GCM, its key HKDF-SHA256 of the block
//     key, info "mongostore document encryption v3".
//   - session handles (ListSessions): HMAC-SHA256 of the _id, its key
//     HKDF-SHA256 of the first hash key, info "mongostore session handle v1";
//   - owner digests (the owner index): HMAC-SHA256 of the owner, its key
//     HKDF-SHA256 of each hash key, info "mongostore owner index v1".
const (
	macKeyLabelV1     = "mongostore v1 document MAC"
	macKeyInfoV2      = "mongostore document MAC v2"
	encryptionKeyInfo = "mongostore document encryption v3"
	handleKeyInfo     = "mongostore session handle v1"
	ownerKeyInfo      = "mongostore owner index v1"
)

// sealedFields are the fields of a session document that its MAC covers.
type sealedFields struct {
	version   int
	docID     string
	createdAt time.Time
	updatedAt time.Time // covered from version 2 on
	expiresAt time.Time
	data      []byte // from version 3 on, an envelope (see dataSealer.wrap)
}

// dataSealer authenticates, and optionally encrypts, stored session data.
// Session values are decoded only after their MAC checks out, so bytes
// written to the collection by anyone without the app's keys (a
// compromised or shared database, a restored foreign backup) never reach
// the codec: encoding/gob is not hardened against hostile input, and a few
// bytes can make it allocate without bound. The MAC also covers the times
// the store trusts (created, updated, expires), so moving one in the
// database makes the document unreadable rather than longer-lived.
type dataSealer struct {
	keysV1 [][]byte     // version 1 MAC keys, to verify old documents
	keys   [][]byte     // version 2+ MAC keys: the first signs, all verify
	macs   []*sync.Pool // reusable HMAC states, one pool per key of keys
	aeads  []cipher.AEAD
	// encrypt says new documents are encrypted: the first key pair has a
	// block key. Documents encrypted with any pair's block key decrypt.
	encrypt bool
	// handleKey, from the first key pair's hash key, makes the handles of
	// ListSessions (see handle).
	handleKey []byte
	// ownerKeys, one per key pair, make the owner digests of the owner
	// index (see ownerDigest): the first for new documents, all of them to
	// find documents written before a key rotation.
	ownerKeys [][]byte
}

// newDataSealer derives the document keys from the key pairs.
func newDataSealer(pairs []keyPair) (*dataSealer, error) {
	d := &dataSealer{encrypt: len(pairs) > 0 && pairs[0].block != nil}
	for i, p := range pairs {
		if i == 0 {
			key, err := hkdf.Key(sha256.New, p.hash, nil, handleKeyInfo, sha256.Size)
			if err != nil {
				return nil, fmt.Errorf("%w: derive the session handle key: %w", ErrInvalidConfig, err)
			}
			d.handleKey = key
		}
		ownerKey, err := hkdf.Key(sha256.New, p.hash, nil, ownerKeyInfo, sha256.Size)
		if err != nil {
			return nil, fmt.Errorf("%w: derive the owner index key: %w", ErrInvalidConfig, err)
		}
		d.ownerKeys = append(d.ownerKeys, ownerKey)
		key, err := hkdf.Key(sha256.New, p.hash, nil, macKeyInfoV2, sha256.Size)
		if err != nil {
			return nil, fmt.Errorf("%w: derive the document MAC key: %w", ErrInvalidConfig, err)
		}
		d.keys = append(d.keys, key)
		d.macs = append(d.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
		m := hmac.New(sha256.New, p.hash)
		m.Write([]byte(macKeyLabelV1))
		d.keysV1 = append(d.keysV1, m.Sum(nil))
		if p.block == nil {
			continue
		}
		encKey, err := hkdf.Key(sha256.New, p.block, nil, encryptionKeyInfo, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: derive the document encryption key: %w", ErrInvalidConfig, err)
		}
		block, err := aes.NewCipher(encKey)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		d.aeads = append(d.aeads, aead)
	}
	return d, nil
}

// writeMAC writes f's MAC input, in f's format version, to m.
func writeMAC(m hash.Hash, f sealedFields) {
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
}

// pooledMAC computes f's MAC with the HMAC state of pool.
func pooledMAC(pool *sync.Pool, f sealedFields, sum []byte) []byte {
	m := pool.Get().(hash.Hash)
	m.Reset()
	writeMAC(m, f)
	sum = m.Sum(sum)
	pool.Put(m)
	return sum
}

// seal returns the MAC of a document written now, in the current format
// version (which it sets in f).
func (d *dataSealer) seal(f *sealedFields) []byte {
	f.version = documentVersion
	return pooledMAC(d.macs[0], *f, nil)
}

// verify reports whether sum authenticates f with any of the keys of f's
// format version.
func (d *dataSealer) verify(f sealedFields, sum []byte) bool {
	switch {
	case f.version == 1:
		for _, k := range d.keysV1 {
			m := hmac.New(sha256.New, k)
			writeMAC(m, f)
			if hmac.Equal(sum, m.Sum(nil)) {
				return true
			}
		}
	case f.version >= 2 && f.version <= documentVersion:
		var buf [sha256.Size]byte
		for _, pool := range d.macs {
			if hmac.Equal(sum, pooledMAC(pool, f, buf[:0])) {
				return true
			}
		}
	}
	return false
}

// Envelopes of version 3 document data: the first byte says what follows.
const (
	envelopePlain byte = 0 // the codec's bytes
	envelopeGCM   byte = 1 // a 12-byte nonce, then the codec's bytes sealed with AES-256-GCM, the _id as additional data
)

// wrap returns the stored form of the encoded values plain of document
// docID: encrypted if the first key pair has a block key.
func (d *dataSealer) wrap(docID string, plain []byte) []byte {
	if !d.encrypt {
		return append([]byte{envelopePlain}, plain...)
	}
	aead := d.aeads[0]
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = envelopeGCM
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails (Go 1.24+)
	return aead.Seal(out, out[1:], plain, []byte(docID))
}

// unwrap returns the encoded values in data, the stored form of document
// docID, decrypting them with whichever key pair's block key encrypted
// them.
func (d *dataSealer) unwrap(docID string, data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, errors.New("empty data")
	}
	switch data[0] {
	case envelopePlain:
		return data[1:], nil
	case envelopeGCM:
		for _, aead := range d.aeads {
			if len(data) < 1+aead.NonceSize() {
				break
			}
			nonce, sealed := data[1:1+aead.NonceSize()], data[1+aead.NonceSize():]
			if plain, err := aead.Open(nil, nonce, sealed, []byte(docID)); err == nil {
				return plain, nil
			}
		}
		if len(d.aeads) == 0 {
			return nil, errors.New("the data is encrypted and the store has no block key")
		}
		return nil, errors.New("the data is encrypted with none of the store's block keys")
	}
	return nil, fmt.Errorf("unknown data envelope %#x", data[0])
}
