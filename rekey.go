package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// RekeyOptions say how Store.Rekey runs.
type RekeyOptions struct {
	// DryRun only counts: nothing is written.
	DryRun bool
	// Decrypt lets Rekey store plain the sessions stored encrypted, which
	// it does when the first key pair has no block key and another has:
	// without it, Rekey refuses such keys (a block key put second by
	// mistake would decrypt every session).
	Decrypt bool
	// SingleProcess says that no other process saves sessions while Rekey
	// runs (the application is stopped, or Rekey runs inside its only
	// process). Rekey refuses to write without it where the server's
	// conditional writes are not atomic across processes (FerretDB v1):
	// another process's save could be lost.
	SingleProcess bool
	// Progress, if not nil, gets the counts after each batch.
	Progress func(RekeyCounts)
}

// RekeyCounts are what Store.Rekey found and did.
type RekeyCounts struct {
	Live       int64 // live sessions read
	Changed    int64 // re-sealed under the first key pair (in a dry run: to be)
	Encrypted  int64 // of Changed: stored plain before, encrypted now
	Decrypted  int64 // of Changed: stored encrypted before, plain now
	Unverified int64 // verified by no configured key pair, or not decryptable with them: left alone
	// Undecodable are verified, but hold values the codec cannot decode
	// (types this process has not registered): left alone.
	Undecodable int64
	// ByKey are the sessions that need each key pair, in the order NewStore
	// was given them: the pair whose hash key verifies a session and that
	// reads its data (plain without a block key, encrypted with its block
	// key), or, where no pair does both, the one that verifies it and the
	// one that reads it, each counting it.
	ByKey []int64
}

// rekeyBatch is how many sessions Rekey reads at a time.
const rekeyBatch = 500

// Rekey re-seals every live session under the first key pair (its MAC, its
// encryption if that pair has a block key, its owner digest, format 3), so
// that the older pairs can be removed without signing anybody out; a pair
// without a block key after the first lets it encrypt the sessions stored
// plain. It is idempotent (a session sealed so already is left alone), so
// it resumes after a cut. It never deletes, and leaves a session saved
// meanwhile to that save. Each command is bounded by Config.Timeout, the
// whole by ctx. Errors wrap ErrDatabase, or ErrInvalidConfig for a nil ctx
// or what opts refuse.
func (s *Store) Rekey(ctx context.Context, opts RekeyOptions) (RekeyCounts, error) {
	c := RekeyCounts{ByKey: make([]int64, len(s.sealer.macs))}
	if err := s.checkRekey(ctx, opts); err != nil {
		return c, err
	}
	for after := ""; ; {
		docs, err := s.liveBatch(ctx, after)
		if err != nil {
			return c, err
		}
		for _, raw := range docs {
			after, _ = raw.Lookup(fieldID).StringValueOK()
			if err := s.rekey(ctx, raw, opts.DryRun, &c); err != nil {
				return c, err
			}
		}
		if opts.Progress != nil {
			opts.Progress(c)
		}
		if len(docs) < rekeyBatch {
			return c, nil
		}
	}
}

// liveBatch reads the next rekeyBatch live sessions after after, bounded
// by Config.Timeout.
func (s *Store) liveBatch(ctx context.Context, after string) ([]bson.Raw, error) {
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	return s.coll.findLive(ctx, after, s.cfg.Now(), rekeyBatch)
}

// checkRekey refuses a nil ctx, and what opts do not allow.
func (s *Store) checkRekey(ctx context.Context, opts RekeyOptions) error {
	if ctx == nil {
		return errNil("context")
	}
	if !s.sealer.encrypt && s.sealer.decrypts() && !opts.Decrypt {
		return fmt.Errorf("%w: the first key pair has no block key but another has one: Rekey would store the "+
			"encrypted sessions plain; put the block key first, or set Decrypt to mean it", ErrInvalidConfig)
	}
	if opts.DryRun || opts.SingleProcess {
		return nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	atomic, err := s.coll.atomicWrites(ctx)
	if err == nil && !atomic {
		err = fmt.Errorf("%w: this server's conditional writes are not atomic across processes (FerretDB v1), so "+
			"a session saved by another process during Rekey could lose that save: stop the application and set SingleProcess", ErrInvalidConfig)
	}
	return err
}

// rekey re-seals one session, raw, under the first key pair if need be,
// and counts it in c.
func (s *Store) rekey(ctx context.Context, raw bson.Raw, dryRun bool, c *RekeyCounts) error {
	c.Live++
	d, plain, err := s.unseal(raw)
	if err != nil {
		c.Unverified++
		return nil
	}
	for _, pair := range s.sealer.needs(&d) {
		c.ByKey[pair]++
	}
	values, err := s.cfg.Codec.Decode(plain)
	if err != nil { // its owner, whose digest the new key pair needs, is unknown
		c.Undecodable++
		return nil
	}
	owner, _ := ownerOf(values)
	if s.sealer.current(&d, owner) {
		return nil
	}
	was, wasEncrypted := d.version(), d.data[0] == envelopeGCM
	d.format, d.rev, d.data, d.owner = formatVersion, d.rev+1, s.sealer.wrap(d.id, plain), ""
	if owner != "" {
		d.owner = s.sealer.ownerDigest(owner)
	}
	s.sealer.seal(&d)
	if !dryRun {
		if written, err := s.rewrite(ctx, &d, was); !written {
			return err
		}
	}
	c.Changed++
	if encrypted := d.data[0] == envelopeGCM; encrypted && !wasEncrypted {
		c.Encrypted++
	} else if !encrypted && wasEncrypted {
		c.Decrypted++
	}
	return nil
}

// rewrite writes d over the version was of its document, as a save of it
// in this process would, and says whether it did: not if the session ended
// or was saved meanwhile (that save sealed it).
func (s *Store) rewrite(ctx context.Context, d *document, was version) (bool, error) {
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	unlock, err := s.coll.locks.lock(ctx, d.id)
	if err != nil {
		return false, err
	}
	defer unlock()
	theirs, err := s.coll.update(ctx, d, was, s.cfg.Now())
	if errors.Is(err, ErrSessionGone) || theirs != nil {
		return false, nil
	}
	return err == nil, err
}
