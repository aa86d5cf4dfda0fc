package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/review"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var sessionsCommand = command{
	name:    "sessions",
	summary: "list a user's live sessions (needs SESSION_KEY)",
	usage:   "-owner user [-json] [-db name] [-collection name]",
	keys:    true,
	help: `
Lists a user's live sessions, the latest saved first (Store.ListSessions):
each one's handle (for 'end -handle'), device label, and when it was
created, last saved and expires, in UTC. It needs the application's keys,
SESSION_KEY (and SESSION_BLOCK_KEY if it encrypts session values), and
fails if they read none of the collection's sessions.`,
	flags: func(fs *flag.FlagSet) body {
		owner, validate := ownerFlag(fs, "list")
		asJSON := fs.Bool("json", false, "print the sessions as JSON")
		return body{validate, func(ctx context.Context, a *app, c *conn) error {
			return a.keyedStore(ctx, c, "nothing was listed", true, func(s *mongostore.Store, none string) error { return a.sessions(ctx, s, none, *owner, *asJSON) })
		}}
	},
}

var endCommand = command{
	name:    "end",
	summary: "end all of a user's sessions, or one (needs SESSION_KEY)",
	usage:   "-owner user [-handle h] [-dry-run] [-db name] [-collection name]",
	keys:    true,
	help: `
Ends every session of a user (Store.EndOtherSessions), as after a password
change, and prints how many; with -handle, only that one (see 'sessions').
Ended means ended: the documents are deleted, so a device's next request
gets a fresh session, and a save under way there fails instead of bringing
its session back. With -dry-run it lists what it would end, and ends
nothing. Needs SESSION_KEY; deletes nothing if it reads none of the
collection's sessions.`,
	flags: func(fs *flag.FlagSet) body {
		owner, validateOwner := ownerFlag(fs, "end")
		handle := fs.String("handle", "", "end only the session with this handle (see 'sessions')")
		dry := fs.Bool("dry-run", false, "list the sessions it would end, and end none")
		validate := func() (err error) {
			fs.Visit(func(f *flag.Flag) { // a script's unset variable must not end them all
				if f.Name == "handle" && *handle == "" {
					err = usagef("-handle is empty: give the handle of the session to end (see 'sessions'), or leave -handle out to end every session of the user")
				}
			})
			return cmp.Or(validateOwner(), err)
		}
		return body{validate, func(ctx context.Context, a *app, c *conn) error {
			return a.keyedStore(ctx, c, "nothing was deleted", true, func(s *mongostore.Store, none string) error {
				if *dry {
					return a.wouldEnd(ctx, s, none, *owner, *handle)
				}
				return a.end(ctx, s, none, *owner, *handle)
			})
		}}
	},
}

// wouldEnd lists the sessions end would end, and ends none.
func (a *app) wouldEnd(ctx context.Context, store *mongostore.Store, none, owner, handle string) error {
	list, err := store.ListSessions(ctx, owner, nil)
	i := slices.IndexFunc(list, func(s mongostore.OwnedSession) bool { return s.Handle == handle })
	switch {
	case err != nil:
		return err
	case handle == "":
		fmt.Fprintf(a.stdout, "a dry run, nothing was ended: end would end every session of %q%s:\n", owner,
			map[bool]string{true: ", these and any older ones", false: " of these"}[len(list) >= listCap])
		return a.printSessions(list, none, owner, false)
	case i < 0:
		return noHandle(owner, handle)
	}
	_, err = fmt.Fprintf(a.stdout, "a dry run, nothing was ended: end would end %s\n", describe(list[i], owner))
	return err
}

// listCap is the most sessions Store.ListSessions lists, the latest saved.
const listCap = 1000

// noHandle is the error of a handle that names no live session of owner.
func noHandle(owner, handle string) error {
	return problemf("none of the latest %d live sessions of %q has the handle %q (list them: mongostore-admin sessions -owner %s)", listCap, owner, handle, shellQuote(owner))
}

// describe names s, a session of owner, for a line of end's.
func describe(s mongostore.OwnedSession, owner string) string {
	return fmt.Sprintf("the session %s of %q (%s, last saved %s UTC)", s.Handle, owner, cmp.Or(printable(s.Device), "no device label"), utc(s.UpdatedAt))
}

// ownerFlag defines -owner on fs; it returns it, and the check that it is given.
func ownerFlag(fs *flag.FlagSet, verb string) (*string, func() error) {
	owner := fs.String("owner", "", "the user, as the application gave it to SetOwner (required)")
	return owner, func() error {
		if *owner == "" {
			return usagef("-owner is required: the user whose sessions to %s, as the application gave it to SetOwner", verb)
		}
		return nil
	}
}

// keyedStore runs f with a store of c's keys (ExpiryNone: it changes nothing) once they read
// c's sessions (done says what was done if not); none notes that c holds none, if so. For a
// command on a user's sessions (owned), it fails after f if some may have been left out.
func (a *app) keyedStore(ctx context.Context, c *conn, done string, owned bool, f func(store *mongostore.Store, none string) error) error {
	if wc := c.opts.WriteConcern; wc != nil && !wc.Acknowledged() {
		return usagef("MONGODB_URI asks for unacknowledged writes (w=0): the store must know what each write did; remove w=0 from it")
	}
	sample, err := a.sessionSample(ctx, c)
	if err != nil {
		return err
	}
	deadline, _ := ctx.Deadline() // start's -timeout
	skipped := skipCounter{slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), new(int64)}
	cfg := mongostore.Config{Expiry: mongostore.ExpiryNone, Timeout: max(time.Until(deadline), time.Millisecond), Logger: slog.New(skipped)}
	store, err := mongostore.NewStore(ctx, c.coll, cfg, c.keyPairs...)
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	defer store.Close()
	unread, err := a.checkKeys(store, c, sample, done)
	if err != nil {
		return err
	}
	if err := f(store, map[bool]string{true: " (" + c.name() + " holds no sessions)"}[len(sample) == 0]); err != nil || !owned {
		return err
	}
	switch n := *skipped.n; {
	case n > 0:
		return problemf("%s of the user in %s opened with none of these keys, and %s neither listed nor ended: give every key pair the application has",
			plural(int(n), "session"), c.name(), map[bool]string{true: "was", false: "were"}[n == 1])
	case unread > 0: // of a hash key not given, the user's sessions cannot even be found
		return problemf("some sessions in %s open with none of these keys (see the warning): the user's, if any, were neither listed nor ended; give every key pair the application has", c.name())
	}
	return nil
}

// skipCounter keeps the most sessions one of the store's listings skipped,
// as it logs them: those that open with none of the keys given (each
// round of an ending lists them again).
type skipCounter struct {
	slog.Handler
	n *int64
}

func (h skipCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasSuffix(r.Message, "listing sessions: skipped unreadable ones") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "count" {
				*h.n = max(*h.n, a.Value.Int64())
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

// ownedSession is a session as sessions -json prints it.
type ownedSession struct {
	Handle    string    `json:"handle"`
	Device    string    `json:"device"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (a *app) sessions(ctx context.Context, store *mongostore.Store, none, owner string, asJSON bool) error {
	list, err := store.ListSessions(ctx, owner, nil)
	if err != nil {
		return err
	}
	return a.printSessions(list, none, owner, asJSON)
}

// printSessions prints list, owner's sessions (none notes that the collection holds none).
func (a *app) printSessions(list []mongostore.OwnedSession, none, owner string, asJSON bool) error {
	if len(list) >= listCap {
		fmt.Fprintf(a.stderr, "mongostore-admin: a listing holds the %d latest saved sessions of a user: %q may have older ones\n", listCap, owner)
	}
	switch {
	case asJSON:
		out := make([]ownedSession, 0, len(list))
		for _, s := range list {
			out = append(out, ownedSession{s.Handle, s.Device, s.CreatedAt.UTC(), s.UpdatedAt.UTC(), s.ExpiresAt.UTC()})
		}
		return printJSON(a.stdout, out)
	case len(list) == 0:
		_, err := fmt.Fprintf(a.stdout, "no live sessions of %q%s\n", owner, none)
		return err
	}
	fmt.Fprintf(a.stdout, "%s of %q, the latest saved first (times in UTC):\n\n", plural(len(list), "live session"), owner)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HANDLE\tDEVICE\tCREATED\tUPDATED\tEXPIRES")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Handle, cmp.Or(printable(s.Device), "-"), utc(s.CreatedAt), utc(s.UpdatedAt), utc(s.ExpiresAt))
	}
	return tw.Flush()
}

func (a *app) end(ctx context.Context, store *mongostore.Store, none, owner, handle string) error {
	if handle != "" {
		s, ended, err := store.EndSession(ctx, owner, handle, nil)
		switch {
		case err != nil:
			return err
		case !ended:
			return noHandle(owner, handle)
		}
		_, err = fmt.Fprintf(a.stdout, "ended %s\n", describe(s, owner))
		return err
	}
	n, err := store.EndOtherSessions(ctx, owner, nil)
	switch {
	case err != nil:
		return err
	case n == 0:
		_, err = fmt.Fprintf(a.stdout, "no live session of %q to end%s\n", owner, none)
	default:
		_, err = fmt.Fprintf(a.stdout, "ended every session of %q that these keys find: %s\n", owner, plural(int(n), "session"))
	}
	return err
}

// plural returns n and the noun, plural unless n is 1: "2 documents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// utc formats t for the tables, in UTC, to the second.
func utc(t time.Time) string { return t.UTC().Format(time.DateTime) }

// printable returns s, quoted unless all printable: a device label, from a User-Agent, must not reach the terminal raw.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@._-+=:/") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sampleSize is how many documents tell what a collection holds.
const sampleSize = 10

// sessionSample returns the sessions among a sample of c's documents: the live ones that expire
// last (the latest saved, with the current keys) and first (the oldest: under the keys of before a
// rotation, if any is left), or any; it fails if c is missing, or not the store's.
func (a *app) sessionSample(ctx context.Context, c *conn) ([]bson.Raw, error) {
	if err := c.requireCollection(ctx); err != nil {
		return nil, err
	}
	live := expiresAt("$gt", time.Now())
	var docs []bson.Raw
	for _, q := range []struct {
		filter bson.D
		opts   *options.FindOptionsBuilder
	}{
		{live, options.Find().SetSort(bson.D{{Key: setup.FieldExpiresAt, Value: -1}})},
		{live, options.Find().SetSort(bson.D{{Key: setup.FieldExpiresAt, Value: 1}})},
		{bson.D{}, options.Find()}, // if none is live, in natural order: no sort of a collection that may have no index for it
	} {
		if len(q.filter) == 0 && len(docs) > 0 {
			break
		}
		var found []bson.Raw
		cur, err := c.coll.Find(ctx, q.filter, q.opts.SetLimit(sampleSize))
		if err == nil {
			err = cur.All(ctx, &found)
		}
		if err != nil {
			return nil, wrap("sample the documents of "+c.name(), err)
		}
		for _, d := range found {
			if !slices.ContainsFunc(docs, func(o bson.Raw) bool { return o.Lookup("_id").Equal(d.Lookup("_id")) }) {
				docs = append(docs, d)
			}
		}
	}
	if len(docs) == 0 {
		return nil, nil
	}
	return a.sessionsOf(c, docs, nil)
}

// sessionsOf returns the sessions among docs, sampled from c, unless err.
func (a *app) sessionsOf(c *conn, docs []bson.Raw, err error) ([]bson.Raw, error) {
	var sessions []bson.Raw
	for _, doc := range docs {
		if review.IsSessionDocument(doc) {
			sessions = append(sessions, doc)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case len(sessions) == 0:
		elems, _ := docs[0].Elements()
		var names []string
		for _, e := range elems[:min(len(elems), 8)] {
			names = append(names, e.Key())
		}
		return nil, fmt.Errorf("%s does not hold mongostore sessions: none of the documents sampled (%d) has the fields of a "+
			"session (v, rev, data, mac, …); the first has %s: check DB_NAME or -db, and SESSION_COLLECTION or -collection",
			c.name(), len(docs), strings.Join(names, ", "))
	case len(sessions) < len(docs):
		fmt.Fprintf(a.stderr, "mongostore-admin: warning: %d of the %d documents sampled from %s are not sessions\n",
			len(docs)-len(sessions), len(docs), c.name())
	}
	return sessions, nil
}

// checkKeys fails if store's keys open none of sessions, sampled from c,
// and warns if they do not open some, and returns how many; done says what
// was done.
func (a *app) checkKeys(store *mongostore.Store, c *conn, sessions []bson.Raw, done string) (unread int, _ error) {
	var first error
	for _, doc := range sessions {
		if err := store.CheckDocument(doc); err != nil {
			unread, first = unread+1, cmp.Or(first, err)
		}
	}
	if unread == 0 || unread < len(sessions) {
		if unread > 0 {
			fmt.Fprintf(a.stderr, "mongostore-admin: warning: %d of the %d sessions sampled from %s do not open with these keys (the first: %v): those under a key pair not given are neither listed, ended nor re-sealed\n", unread, len(sessions), c.name(), first)
		}
		return unread, nil
	}
	names := map[bool]string{false: "SESSION_KEY", true: "SESSION_KEY and SESSION_BLOCK_KEY"}[a.getenv("SESSION_BLOCK_KEY") != ""]
	return unread, fmt.Errorf("the keys of %s do not match the application's: none of the sessions sampled from %s (%d) "+
		"can be read with them (%v); if the application has more than one (a rotation), give them all, newest first: "+
		"SESSION_KEY=new,old; %s", names, c.name(), len(sessions), first, done)
}
