package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/mongostore/mongostore"
)

var sessionsCommand = command{
	name:    "sessions",
	summary: "list a user's live sessions (needs SESSION_KEY)",
	usage:   "-owner user [-json] [-db name] [-collection name]",
	keys:    true,
	help: `
Lists the live sessions of a user, the latest saved first, as the
application's own page does (Store.ListSessions): each one's handle (for
'end -handle'), device label, and when it was created, last saved and
expires, in UTC. Only sessions whose authenticated values name the user
are listed, so it needs the application's key: SESSION_KEY (and
SESSION_BLOCK_KEY if the application encrypts session values).`,
	flags: func(fs *flag.FlagSet) body {
		owner := fs.String("owner", "", "the user, as the application gave it to SetOwner (required)")
		asJSON := fs.Bool("json", false, "print the sessions as JSON")
		return body{
			validate: requireOwner(owner, "list"),
			run:      func(ctx context.Context, a *app, c *conn) error { return a.sessions(ctx, c, *owner, *asJSON) },
		}
	},
}

var endCommand = command{
	name:    "end",
	summary: "end all of a user's sessions, or one (needs SESSION_KEY)",
	usage:   "-owner user [-handle h] [-db name] [-collection name]",
	keys:    true,
	help: `
Ends every session of a user (Store.EndOtherSessions with no current
session), as after a password change, and prints how many documents were
deleted; with -handle, only the session of that handle (from 'sessions').
Ended means ended: the documents are deleted, so each device's next
request gets a fresh session, and a save under way there fails instead of
bringing its session back. Needs the application's key, SESSION_KEY: the
owner is found by a digest keyed with it.`,
	flags: func(fs *flag.FlagSet) body {
		owner := fs.String("owner", "", "the user, as the application gave it to SetOwner (required)")
		handle := fs.String("handle", "", "end only the session with this handle (see 'sessions')")
		return body{
			validate: requireOwner(owner, "end"),
			run:      func(ctx context.Context, a *app, c *conn) error { return a.end(ctx, c, *owner, *handle) },
		}
	},
}

// requireOwner returns the check that -owner is given.
func requireOwner(owner *string, verb string) func() error {
	return func() error {
		if *owner == "" {
			return usagef("-owner is required: the user whose sessions to %s, as the application gave it to SetOwner", verb)
		}
		return nil
	}
}

// keyedStore returns a store on c's collection with the keys of
// SESSION_KEY, having checked that the collection holds sessions and that
// the keys read them (done says what was done if not), and how many
// sessions it checked them on.
func (a *app) keyedStore(ctx context.Context, c *conn, done string) (*mongostore.Store, int, error) {
	if err := c.requireCollection(ctx); err != nil {
		return nil, 0, err
	}
	sample, err := a.sessionSample(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	store, err := a.store(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	if err := a.checkKeys(store, c, sample, done); err != nil {
		store.Close()
		return nil, 0, err
	}
	return store, len(sample), nil
}

// store returns a store on c's collection with the keys of SESSION_KEY. It
// is configured with ExpiryNone: it sends no command to set up, creates no
// index and starts no goroutine. Its warnings go to standard error.
func (a *app) store(ctx context.Context, c *conn) (*mongostore.Store, error) {
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	timeout := time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	store, err := mongostore.NewStore(ctx, c.coll, mongostore.Config{Expiry: mongostore.ExpiryNone, Logger: logger, Timeout: timeout}, c.keyPairs...)
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	return store, nil
}

// ownedSession is a session as sessions -json prints it.
type ownedSession struct {
	Handle    string    `json:"handle"`
	Device    string    `json:"device"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (a *app) sessions(ctx context.Context, c *conn, owner string, asJSON bool) error {
	store, sampled, err := a.keyedStore(ctx, c, "nothing was listed")
	if err != nil {
		return err
	}
	defer store.Close()
	list, err := store.ListSessions(ctx, owner, nil)
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]ownedSession, 0, len(list))
		for _, s := range list {
			out = append(out, ownedSession{s.Handle, s.Device, s.CreatedAt.UTC(), s.UpdatedAt.UTC(), s.ExpiresAt.UTC()})
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(list) == 0 {
		fmt.Fprintf(a.stdout, "no live sessions of %s%s\n", strconv.Quote(owner), noneHeld(sampled, c))
		return nil
	}
	plural := "s"
	if len(list) == 1 {
		plural = ""
	}
	fmt.Fprintf(a.stdout, "%d live session%s of %s, the latest saved first (times in UTC):\n\n", len(list), plural, strconv.Quote(owner))
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HANDLE\tDEVICE\tCREATED\tUPDATED\tEXPIRES")
	for _, s := range list {
		device := printable(s.Device)
		if device == "" {
			device = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Handle, device, utc(s.CreatedAt), utc(s.UpdatedAt), utc(s.ExpiresAt))
	}
	return tw.Flush()
}

func (a *app) end(ctx context.Context, c *conn, owner, handle string) error {
	store, sampled, err := a.keyedStore(ctx, c, "nothing was deleted")
	if err != nil {
		return err
	}
	defer store.Close()
	if handle != "" {
		s, ended, err := store.EndSession(ctx, owner, handle, nil)
		if err != nil {
			return err
		}
		if !ended {
			return problemError{fmt.Sprintf("no live session of %s has the handle %s (list them: mongostore-admin sessions -owner %s)",
				strconv.Quote(owner), strconv.Quote(handle), shellQuote(owner))}
		}
		device := printable(s.Device)
		if device == "" {
			device = "no device label"
		}
		fmt.Fprintf(a.stdout, "ended the session %s of %s (%s, last saved %s UTC)\n", s.Handle, strconv.Quote(owner), device, utc(s.UpdatedAt))
		return nil
	}
	n, err := store.EndOtherSessions(ctx, owner, nil)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(a.stdout, "no session of %s to end: 0 documents deleted%s\n", strconv.Quote(owner), noneHeld(sampled, c))
		return nil
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	fmt.Fprintf(a.stdout, "ended every session of %s: %d document%s deleted\n", strconv.Quote(owner), n, plural)
	return nil
}

// noneHeld says, if no session was sampled from c, that it holds none.
func noneHeld(sampled int, c *conn) string {
	if sampled > 0 {
		return ""
	}
	return " (" + c.name() + " holds no sessions)"
}

// utc formats t for the tables, in UTC, to the second.
func utc(t time.Time) string { return t.UTC().Format(time.DateTime) }

// printable returns s as is if it holds only printable characters, else
// quoted: a device label comes from a User-Agent header, and must not
// send escape sequences to the operator's terminal.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
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
