package mongostore

import "go.mongodb.org/mongo-driver/v2/bson"

// CheckDocument reports whether the store's keys open raw, a document of
// its collection: nil if it is a session document whose MAC verifies with
// one of the store's hash keys and whose data opens with its block keys,
// else an error wrapping ErrDecode that says why. Neither expiry nor the
// codec matters: an operator's tool can tell from a few documents whether
// it was given the application's keys, as mongostore-admin does, without
// the types the application registers.
func (s *Store) CheckDocument(raw bson.Raw) error {
	_, _, err := s.unseal(raw)
	return err
}
