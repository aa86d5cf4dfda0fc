package mongostore

import (
	"bytes"
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
)

// A session's token is its cookie's payload and its session.ID: the chain
// ID, its document's _id for the whole sign-in, a dot, and a secret of
// which the document keeps only the SHA-256 (sid). Knowing a chain ID
// alone loads nothing. A token of formats 1 and 2 is a bare secret; its
// document's _id is the secret's SHA-256.

// idBytes is the number of random bytes of a chain ID and of a secret (256 bits).
const idBytes = 32

var secretEncoding = base64.RawURLEncoding

// randomBytes returns n bytes from crypto/rand.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (Go 1.24+): it crashes the program instead
	return b
}

// newToken returns a token of chain (a fresh chain for "") with a fresh
// secret, and the secret's hash.
func newToken(chain string) (token, sid string) {
	if chain == "" {
		chain = hex.EncodeToString(randomBytes(idBytes))
	}
	secret := secretEncoding.EncodeToString(randomBytes(idBytes))
	return chain + "." + secret, hashHex(secret)
}

// newHolderID returns a fresh ID for the holder of a session's lock.
func newHolderID() string { return hex.EncodeToString(randomBytes(16)) }

// splitToken returns the chain ID and the secret of token, and whether
// token has the form newToken (or formats 1 and 2) gives.
func splitToken(token string) (chain, secret string, ok bool) {
	chain, secret, found := strings.Cut(token, ".")
	if !found {
		if !validSecret(token) {
			return "", "", false
		}
		return hashHex(token), token, true
	}
	return chain, secret, validChainID(chain) && validSecret(secret)
}

// validToken reports whether token has the form of a token.
func validToken(token string) bool {
	_, _, ok := splitToken(token)
	return ok
}

// validSecret reports whether secret has the form of idBytes in base64url.
func validSecret(secret string) bool {
	return len(secret) == secretEncoding.EncodedLen(idBytes) && allBytes(secret, func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
	})
}

// sidMatches reports, in constant time, whether sid is the hash of secret.
func sidMatches(sid, secret string) bool {
	var in [64]byte // secrets are 43 bytes: no allocation
	if len(secret) > len(in) || len(sid) != 2*sha256.Size {
		return false
	}
	sum := sha256.Sum256(in[:copy(in[:], secret)])
	var want, got [2 * sha256.Size]byte
	hex.Encode(want[:], sum[:])
	copy(got[:], sid)
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

// allBytes reports whether every byte of s satisfies ok.
func allBytes(s string, ok func(byte) bool) bool {
	for i := range len(s) {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// validChainID reports whether chain is 64 lowercase hex digits.
func validChainID(chain string) bool {
	return len(chain) == 2*idBytes && allBytes(chain, func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' })
}

// hashHex returns the hex SHA-256 of s.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// handle returns the handle of chain, for ListSessions and events: a
// digest of the chain ID alone, so that it survives key rotation.
func handle(chain string) string {
	sum := sha256.Sum256([]byte("mongostore session handle v2\x00" + chain))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// minKeyLength is the least number of bytes of a hash key.
const minKeyLength = 32

// keyPair is one of the application's key pairs: a hash key and an
// optional block key.
type keyPair struct{ hash, block []byte }

// parseKeyPairs checks the keys given to NewStore and pairs them, copied:
// the application may clear its own.
func parseKeyPairs(keys [][]byte) ([]keyPair, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys: give at least a hash key", ErrInvalidConfig)
	}
	var pairs []keyPair
	for i := 0; i < len(keys); i += 2 {
		p := keyPair{hash: bytes.Clone(keys[i])}
		if len(p.hash) < minKeyLength {
			return nil, fmt.Errorf("%w: hash key %d has %d bytes, want at least %d", ErrInvalidConfig, i/2, len(p.hash), minKeyLength)
		}
		if i+1 < len(keys) && len(keys[i+1]) > 0 {
			p.block = bytes.Clone(keys[i+1])
			if n := len(p.block); n != 16 && n != 24 && n != 32 {
				return nil, fmt.Errorf("%w: block key %d has %d bytes, want 16, 24 or 32", ErrInvalidConfig, i/2, n)
			}
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// Document keys, each HKDF-SHA256 of an application key with its own info:
// a MAC key and an owner digest key per hash key, and an AES-256-GCM key
// per block key. The first pair writes, every pair reads.
const (
	macKeyInfo        = "mongostore document MAC v1"
	encryptionKeyInfo = "mongostore document encryption v1"
	ownerKeyInfo      = "mongostore owner index v1"
)

// sealer authenticates and encrypts documents. Bytes written by anyone
// without the application's keys never reach the codec, and a moved time
// makes a document unreadable, not longer-lived.
type sealer struct {
	macs      []*sync.Pool  // HMAC states, one pool per hash key
	blocks    []cipher.AEAD // per pair: its block key's, nil without one
	encrypt   bool          // the first pair has a block key: data is written encrypted
	plainOK   bool          // some pair has no block key: plain data is read (encryption being turned on)
	ownerKeys [][]byte
}

// derive returns the key of info derived from secret.
func derive(secret []byte, info string) []byte {
	key, _ := hkdf.Key(sha256.New, secret, nil, info, sha256.Size) // fails only for lengths over 8160 bytes
	return key
}

func newSealer(pairs []keyPair) *sealer {
	s := &sealer{encrypt: pairs[0].block != nil}
	for _, p := range pairs {
		s.plainOK = s.plainOK || p.block == nil
		macKey := derive(p.hash, macKeyInfo)
		s.macs = append(s.macs, &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, macKey), buf: make([]byte, 0, 256)} }})
		s.ownerKeys = append(s.ownerKeys, derive(p.hash, ownerKeyInfo))
		s.blocks = append(s.blocks, nil)
		if p.block == nil {
			continue
		}
		block, _ := aes.NewCipher(derive(p.block, encryptionKeyInfo)) // a 32-byte key never fails
		aead, _ := cipher.NewGCM(block)                               // nor AES
		s.blocks[len(s.blocks)-1] = aead
	}
	return s
}

// macOf returns d's MAC with the HMAC states of pool.
func macOf(pool *sync.Pool, d *document) []byte {
	m := pool.Get().(*macState)
	defer pool.Put(m)
	return bytes.Clone(m.sum(d))
}

// macMatches reports whether mac is d's MAC with the HMAC states of pool.
func macMatches(pool *sync.Pool, d *document, mac []byte) bool {
	m := pool.Get().(*macState)
	defer pool.Put(m)
	return hmac.Equal(mac, m.sum(d))
}

// sum returns d's MAC, in m's buffer.
func (m *macState) sum(d *document) []byte {
	m.h.Reset()
	b := binary.BigEndian.AppendUint64(m.buf[:0], uint64(d.format))
	b = append(binary.BigEndian.AppendUint64(b, uint64(len(d.id))), d.id...)
	switch d.format {
	case format2:
		lineage := cmp.Or(d.lineage, d.id)
		b = append(binary.BigEndian.AppendUint64(b, uint64(len(lineage))), lineage...)
	case formatVersion:
		b = append(binary.BigEndian.AppendUint64(b, uint64(len(d.sid))), d.sid...)
	}
	for _, v := range [...]int64{d.rev, d.createdAt.UnixMilli(), d.updatedAt.UnixMilli(), d.expiresAt.UnixMilli(), int64(d.maxAge)} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	m.h.Write(b)
	m.h.Write(d.data)
	m.buf = m.h.Sum(b)
	return m.buf[len(b):]
}

// macState is a pooled HMAC state, with a buffer for what it hashes.
type macState struct {
	h   hash.Hash
	buf []byte
}

// current reports whether d is sealed as the first key pair writes: its
// MAC, its envelope and its owner digest (owner is its owner, if any).
func (s *sealer) current(d *document, owner string) bool {
	if !macMatches(s.macs[0], d, d.mac) || d.format != formatVersion {
		return false
	}
	if owner != "" && d.owner != s.ownerDigest(owner) {
		return false
	}
	return s.reads(0, d)
}

// seal sets d's MAC, with the first key.
func (s *sealer) seal(d *document) { d.mac = macOf(s.macs[0], d) }

// verify reports whether d's MAC checks out with any key.
func (s *sealer) verify(d *document) bool { return s.keyOf(d) >= 0 }

// keyOf returns the index of the key pair d's MAC checks out with, or -1.
func (s *sealer) keyOf(d *document) int {
	for i, pool := range s.macs {
		if macMatches(pool, d, d.mac) {
			return i
		}
	}
	return -1
}

// needs returns the key pairs d needs to be opened: the first whose hash
// key verifies it and that reads its data (plain without a block key,
// encrypted with its block key), or else the first that verifies it and
// the first that reads it; nil if none verifies it or none reads it.
func (s *sealer) needs(d *document) []int {
	verifies := -1
	for i, pool := range s.macs {
		if !macMatches(pool, d, d.mac) {
			continue
		}
		if s.reads(i, d) {
			return []int{i}
		}
		if verifies < 0 {
			verifies = i
		}
	}
	if verifies < 0 {
		return nil
	}
	for i := range s.macs {
		if s.reads(i, d) {
			return []int{verifies, i}
		}
	}
	return nil
}

// decrypts reports whether some key pair has a block key.
func (s *sealer) decrypts() bool {
	return slices.ContainsFunc(s.blocks, func(aead cipher.AEAD) bool { return aead != nil })
}

// reads reports whether key pair i reads d's data.
func (s *sealer) reads(i int, d *document) bool {
	switch aead := s.blocks[i]; {
	case len(d.data) == 0:
		return false
	case aead == nil:
		return d.data[0] == envelopePlain
	case d.data[0] == envelopeGCM:
		_, ok := openGCM(aead, d.id, d.data)
		return ok
	}
	return false
}

// Envelopes of document data: the first byte says what follows.
const (
	envelopePlain byte = 0 // the codec's bytes
	envelopeGCM   byte = 1 // a 12-byte nonce, then the codec's bytes sealed with AES-256-GCM, the _id as additional data
)

// wrap returns the stored form of plain, the encoded values of document
// id: encrypted if the first key pair has a block key.
func (s *sealer) wrap(id string, plain []byte) []byte {
	if !s.encrypt {
		return append([]byte{envelopePlain}, plain...)
	}
	aead := s.blocks[0]
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = envelopeGCM
	_, _ = rand.Read(out[1:])
	return aead.Seal(out, out[1:], plain, []byte(id))
}

// unwrap returns the encoded values in data, the stored form of document
// id. Plain data is refused unless some key pair has no block key (while
// encryption is turned on, see Rekey): whoever has the hash key and can
// write to the collection must not slip values past encryption.
func (s *sealer) unwrap(id string, data []byte) ([]byte, error) {
	switch {
	case len(data) == 0:
		return nil, errors.New("empty data")
	case data[0] == envelopePlain && !s.plainOK:
		return nil, errors.New("the data is not encrypted, and the store encrypts")
	case data[0] == envelopePlain:
		return data[1:], nil
	case data[0] != envelopeGCM:
		return nil, fmt.Errorf("unknown data envelope %#x", data[0])
	}
	for _, aead := range s.blocks {
		if aead == nil {
			continue
		}
		if plain, ok := openGCM(aead, id, data); ok {
			return plain, nil
		}
	}
	if !s.decrypts() {
		return nil, errors.New("the data is encrypted and the store has no block key")
	}
	return nil, errors.New("the data is encrypted with none of the store's block keys")
}

// openGCM opens data, the GCM envelope of document id, with aead.
func openGCM(aead cipher.AEAD, id string, data []byte) ([]byte, bool) {
	n := 1 + aead.NonceSize()
	if len(data) < n {
		return nil, false
	}
	plain, err := aead.Open(nil, data[1:n], data[n:], []byte(id))
	return plain, err == nil
}

// digest returns the HMAC-SHA256 of s under key, cut to 128 bits,
// base64url-encoded.
func digest(key []byte, s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// ownerDigest returns owner's digest under the current key pair.
func (s *sealer) ownerDigest(owner string) string { return digest(s.ownerKeys[0], owner) }

// ownerDigests returns owner's digest under each key pair, the current one
// first: documents saved before a rotation hold an older one.
func (s *sealer) ownerDigests(owner string) []string {
	out := make([]string, len(s.ownerKeys))
	for i, k := range s.ownerKeys {
		out[i] = digest(k, owner)
	}
	return out
}
