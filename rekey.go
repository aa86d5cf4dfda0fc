package mongostore

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// RekeyCounts are what Store.Rekey found and did.
type RekeyCounts struct {
	Live       int64   // live sessions read
	Changed    int64   // re-sealed under the first key pair (in a dry run: to be)
	Unverified int64   // verified by no configured key pair, or unreadable: left alone
	ByKey      []int64 // sessions each key pair verifies, in the order NewStore was given them
}

// rekeyBatch is how many sessions Rekey reads at a time.
const rekeyBatch = 500

// Rekey re-seals every live session under the first key pair (its MAC, its
// encryption if that pair has a block key, its owner digest), so that the
// older pairs can be removed without signing anybody out; a pair without a
// block key after the first lets it encrypt the sessions stored plain. It
// is idempotent (a session sealed so already is left alone), so it resumes
// after a cut; dryRun only counts. It never deletes, and leaves a session
// saved meanwhile to that save. progress, if not nil, gets the counts
// after each batch. Errors wrap ErrDatabase.
func (s *Store) Rekey(ctx context.Context, dryRun bool, progress func(RekeyCounts)) (RekeyCounts, error) {
	c := RekeyCounts{ByKey: make([]int64, len(s.sealer.macs))}
	for after := ""; ; {
		docs, err := s.coll.findLive(ctx, after, s.cfg.Now(), rekeyBatch)
		if err != nil {
			return c, err
		}
		for _, raw := range docs {
			after, _ = raw.Lookup(fieldID).StringValueOK()
			if err := s.rekey(ctx, raw, dryRun, &c); err != nil {
				return c, err
			}
		}
		if progress != nil {
			progress(c)
		}
		if len(docs) < rekeyBatch {
			return c, nil
		}
	}
}

// rekey re-seals one session, raw, under the first key pair if need be,
// and counts it in c.
func (s *Store) rekey(ctx context.Context, raw bson.Raw, dryRun bool, c *RekeyCounts) error {
	c.Live++
	d, plain, values, err := s.open(raw)
	key := -1
	if err == nil {
		key = s.sealer.keyOf(&d)
	}
	if key < 0 {
		c.Unverified++
		return nil
	}
	c.ByKey[key]++
	owner, _ := ownerOf(values)
	if s.sealer.current(&d, owner) {
		return nil
	}
	if c.Changed++; dryRun {
		return nil
	}
	was := versionOf(raw)
	d.format, d.rev, d.data, d.owner = formatVersion, d.rev+1, s.sealer.wrap(d.id, plain), ""
	if owner != "" {
		d.owner = s.sealer.ownerDigest(owner)
	}
	s.sealer.seal(&d)
	unlock, err := s.coll.serialize(ctx, d.id) // as a save of the session in this process would
	if err != nil {
		return err
	}
	defer unlock()
	theirs, _, err := s.coll.save(ctx, &d, was, s.cfg.Now())
	if errors.Is(err, ErrSessionGone) || theirs != nil { // ended or saved meanwhile
		c.Changed--
		err = nil
	}
	if theirs != nil {
		err = s.coll.restore(ctx, theirs, d.mac)
	}
	return err
}
