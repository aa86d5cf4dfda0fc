package mongostore

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A session becomes a document (see collection.go) and back: its values
// encoded by the codec, wrapped (encrypted with a block key) and sealed by
// a MAC (keys.go).

// open parses a stored document, checks its MAC, decrypts its data and
// decodes the values, which it returns with their encoding. Bytes that fail
// the MAC never reach the codec. Errors wrap ErrDecode.
func (s *Store) open(raw bson.Raw) (d document, encoded []byte, values map[any]any, err error) {
	if d, encoded, err = s.unseal(raw); err != nil {
		return d, nil, nil, err
	}
	if values, err = s.decode(encoded); err != nil {
		return d, nil, nil, err
	}
	return d, encoded, values, nil
}

// decode decodes values with the codec. Errors wrap ErrDecode.
func (s *Store) decode(encoded []byte) (map[any]any, error) {
	values, err := s.cfg.Codec.Decode(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: the codec cannot read its values (written by another codec, or holding a type "+
			"this process has not registered?): %w", ErrDecode, err)
	}
	return values, nil
}

// openLoaded is open for a load of chain. A document the store opened in
// the same bytes before (for the session's previous request) skips the
// parse, the MAC and the decryption, and, from its third load, the codec
// if its values are copyable. A session saved at every request is never
// found in the same bytes: it pays for a copy of them.
func (s *Store) openLoaded(raw bson.Raw, chain string) (document, []byte, map[any]any, error) {
	if len(raw) > maxRememberedDocument {
		return s.open(raw)
	}
	o, ok := s.opened.get(chain)
	if !ok || !bytes.Equal(o.raw, raw) {
		return s.remember(raw, chain)
	}
	if o.values != nil {
		return o.d, o.encoded, cloneValues(o.values), nil
	}
	values, err := s.decode(s.forCodec(o.encoded))
	if size, ok := copyable(values); ok && err == nil {
		o.values = cloneValues(values)
		s.opened.put(chain, o, len(o.raw)+len(o.encoded)+size) // the whole entry, as a generation may have begun since
	}
	return o.d, o.encoded, values, err
}

// remember opens raw, and keeps a copy of it in the memo, with what open
// made of it.
func (s *Store) remember(raw bson.Raw, chain string) (document, []byte, map[any]any, error) {
	raw = bytes.Clone(raw)
	d, encoded, values, err := s.open(raw)
	if err != nil {
		return d, encoded, values, err
	}
	o := openedDocument{raw: raw, d: d, encoded: s.forCodec(encoded)}
	s.opened.put(chain, o, len(raw)+len(o.encoded)+256)
	return d, o.encoded, values, nil
}

// forCodec returns encoded, an encoding the memo keeps, as the codec may
// decode it: as it is (its capacity cut to its length, so that no append
// reaches it) for the store's codecs, which copy what they decode; a copy
// for another, whose values might alias it, and a handler change it.
func (s *Store) forCodec(encoded []byte) []byte {
	switch s.cfg.Codec.(type) {
	case compactCodec, JSONCodec:
		return encoded[:len(encoded):len(encoded)]
	}
	return bytes.Clone(encoded)
}

// unseal parses a stored document, checks its MAC and decrypts its data:
// open but the codec. Errors wrap ErrDecode.
func (s *Store) unseal(raw bson.Raw) (d document, encoded []byte, err error) {
	d, err = parseDocument(raw)
	if err == nil && !s.sealer.verify(&d) {
		err = errors.New("the document fails its integrity check (written without this application's keys)")
	}
	if err == nil {
		encoded, err = s.sealer.unwrap(d.id, d.data)
	}
	if err != nil {
		return d, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return d, encoded, nil
}

// encode encodes values, unless staged holds them encoded, and enforces
// Config.MaxSize.
func (s *Store) encode(values map[any]any, staged []byte) ([]byte, error) {
	data := staged
	if data == nil {
		var err error
		if data, err = s.cfg.Codec.Encode(values); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEncode, err)
		}
	}
	if len(data) > s.cfg.MaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, more than MaxSize (%d)", ErrEncode, len(data), s.cfg.MaxSize)
	}
	return data, nil
}

// document returns the sealed document that sv writes: revision rev+1 of
// the version it builds on, or the first of a new chain.
func (s *Store) document(sv *saving) document {
	maxAge, createdAt := sv.session.Options.MaxAge, sv.st.createdAt
	if sv.st.id == "" {
		createdAt = sv.now
	}
	d := document{id: sv.chain, format: formatVersion, sid: sv.sid, rev: sv.st.rev + 1, createdAt: createdAt.Truncate(time.Millisecond),
		updatedAt: sv.now.Truncate(time.Millisecond), expiresAt: s.expiresAt(maxAge, createdAt, sv.now), maxAge: maxAge,
		data: s.sealer.wrap(sv.chain, sv.data)}
	if owner, _ := ownerOf(sv.session.Values); owner != "" {
		d.owner = s.sealer.ownerDigest(owner)
	}
	s.sealer.seal(&d)
	return d
}
