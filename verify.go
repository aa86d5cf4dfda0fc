package mongostore

import "go.mongodb.org/mongo-driver/v2/bson"

// CheckDocument reports whether the store can read raw, a document of its
// collection: nil if it is a session document whose MAC verifies with one
// of the store's hash keys and whose values open with its block keys and
// codec, else an error wrapping ErrDecode that says why. Expiry does not
// matter. An operator's tool can tell from a few documents whether it was
// given the application's keys, as mongostore-admin does.
func (s *Store) CheckDocument(raw bson.Raw) error {
	_, _, _, err := s.open(raw)
	return err
}
