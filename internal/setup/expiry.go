package setup

import "fmt"

// Answer is how the server answered one of the store's index commands.
type Answer int

// Answers.
const (
	NotAsked Answer = iota
	Accepted
	// Refused: the server does not support it, as the store reads the
	// answer (TTLRefused for a TTL index, Unsupported for collMod).
	Refused
	// Rejected: another answer (MongoDB before 5.1 and DocumentDB reject
	// collMod of a plain index into a TTL one with InvalidOptions).
	Rejected
)

// Read reads err, the outcome of an index command, as an Answer; refused
// says which answers are refusals. ok is false if err is no answer (a
// network failure, a timeout): NewStore fails with it.
func Read(err error, refused func(error) bool) (a Answer, ok bool) {
	switch {
	case err == nil:
		return Accepted, true
	case refused(err):
		return Refused, true
	case IsAnswer(err):
		return Rejected, true
	}
	return NotAsked, false
}

// Answers are the server's answers so far to the store's expiry commands.
type Answers struct {
	CollMod   Answer // collMod of the index on expiresAt to expireAfterSeconds 0
	Dropped   bool   // the store's own plain index was dropped
	CreateTTL Answer // createIndexes of the TTL index
	Restored  bool   // the plain index dropped was created again
}

// Step is a command NewStore sends to prepare the TTL index.
type Step int

// Steps.
const (
	None        Step = iota
	CollMod          // collMod the index on expiresAt to expireAfterSeconds 0
	DropPlain        // drop the store's own plain index, to create the TTL one
	CreateTTL        // createIndexes {expiresAt: 1} with expireAfterSeconds 0
	CreatePlain      // create the plain index dropped again: the GC's sweeps need it
)

// Outcome is how the preparation of the TTL index ends.
type Outcome int

// Outcomes.
const (
	Pending  Outcome = iota // a step is to be sent
	TTL                     // the TTL index is in place
	NoTTL                   // the server refuses TTL indexes: ExpiryAuto falls back to the GC, ExpiryTTL fails
	Conflict                // an index on expiresAt that is not the store's, which collMod cannot fix: ErrInvalidConfig
	Failed                  // createIndexes of the TTL index got another answer: NewStore fails with it
)

// Decision is the next step, or the outcome.
type Decision struct {
	Next    Step
	Outcome Outcome
}

// Decide says what NewStore, in ExpiryAuto or ExpiryTTL, does next about
// the index on expiresAt idx (FindExpiresAt; nil for none), given the
// server's answers so far: it keeps a TTL index with expireAfterSeconds 0,
// creates one where there is none, fixes another with collMod, and where
// collMod is rejected replaces its own plain index (putting it back if the
// server then refuses the TTL index) but leaves any other alone. A partial
// index, TTL or not, is a Conflict: as the TTL index it would spare the
// sessions it leaves out.
func Decide(idx *Index, a Answers) Decision {
	switch {
	case idx != nil && idx.Partial:
		return Decision{Outcome: Conflict}
	case idx != nil && idx.IsTTL():
		return Decision{Outcome: TTL}
	case idx != nil && !a.Dropped:
		return decideCollMod(idx, a.CollMod)
	}
	switch a.CreateTTL {
	case NotAsked:
		return Decision{Next: CreateTTL}
	case Accepted:
		return Decision{Outcome: TTL}
	case Refused:
		if a.Dropped && !a.Restored {
			return Decision{Next: CreatePlain}
		}
		return Decision{Outcome: NoTTL}
	}
	return Decision{Outcome: Failed}
}

// decideCollMod decides about an index on expiresAt that is not the TTL
// one, given the answer to collMod.
func decideCollMod(idx *Index, collMod Answer) Decision {
	switch {
	case collMod == NotAsked:
		return Decision{Next: CollMod}
	case collMod == Accepted:
		return Decision{Outcome: TTL}
	case collMod == Refused:
		return Decision{Outcome: NoTTL}
	case idx.Plain:
		return Decision{Next: DropPlain}
	}
	return Decision{Outcome: Conflict}
}

// ConflictReason says why an index idx of collection is a Conflict, and
// what to do.
func ConflictReason(collection string, idx *Index) string {
	if idx.Partial {
		return fmt.Sprintf("index %q on %s has a partialFilterExpression, so that as the TTL index (which the store would make "+
			"it) it would never delete the sessions it leaves out, and it is not the store's own, so the store leaves it alone: "+
			"drop it with db.getCollection(%q).dropIndex(%q) and start the application again", idx.Name, FieldExpiresAt, collection, idx.Name)
	}
	was := "no expireAfterSeconds"
	if idx.TTL != nil {
		was = fmt.Sprintf("expireAfterSeconds %d", *idx.TTL)
	}
	return fmt.Sprintf("index %q on %s has %s, which collMod cannot change to expireAfterSeconds 0 on this server, "+
		"and it is not the store's own, so the store leaves it alone: drop it with db.getCollection(%q).dropIndex(%q) "+
		"(or make it a TTL index with expireAfterSeconds 0) and start the application again",
		idx.Name, FieldExpiresAt, was, collection, idx.Name)
}
