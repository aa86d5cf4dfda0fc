package loadbench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
)

// This file learns what the floor must do from the store itself: the
// commands one session sends (recorded by a command monitor on a client of
// its own, so that the measured client has none) and the documents the
// store wrote.

// maxTemplates is how many of the store's documents the floor's are copied
// from.
const maxTemplates = 64

// command is a database command the store sent.
type command struct {
	name string
	body bson.Raw
	at   time.Time // when it started
}

// recorder keeps the commands a client sends while it is on.
type recorder struct {
	mu   sync.Mutex
	on   bool
	cmds []command
}

func (r *recorder) started(_ context.Context, e *event.CommandStartedEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.cmds = append(r.cmds, command{name: e.CommandName, body: slices.Clone(e.Command), at: time.Now()})
	}
}

// record returns the commands f sends.
func (r *recorder) record(f func() error) ([]command, error) {
	r.mu.Lock()
	r.on, r.cmds = true, nil
	r.mu.Unlock()
	err := f()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.cmds, err
}

// storeCommands are the commands one session sent through the store.
type storeCommands struct {
	create, load, save []command
	cookie             *http.Cookie // the cookie the store set
}

// recordStore creates, loads and saves one session through a store like
// the one under test (same collection, configuration and keys), on a
// client with a command monitor, and returns the commands each step sent.
func recordStore(ctx context.Context, s settings, collName string, cfg mongostore.Config, keys [][]byte) (storeCommands, error) {
	var sc storeCommands
	rec := &recorder{}
	client, err := mongo.Connect(options.Client().ApplyURI(s.uri).SetMonitor(&event.CommandMonitor{Started: rec.started}))
	if err != nil {
		return sc, fmt.Errorf("connect the recording client: %w", err)
	}
	defer disconnect(ctx, client)
	store, err := mongostore.NewStore(ctx, client.Database(s.db).Collection(collName), cfg, keys...)
	if err != nil {
		return sc, fmt.Errorf("new store (recording client): %w", err)
	}
	defer store.Close()

	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://loadbench.invalid/", nil)
	if err != nil {
		return sc, err
	}
	session, err := store.New(r, cookieName)
	if err != nil {
		return sc, fmt.Errorf("record: new session: %w", err)
	}
	fillSession(session, 0)
	w := httptest.NewRecorder()
	if sc.create, err = rec.record(func() error { return store.Save(r, w, session) }); err != nil {
		return sc, fmt.Errorf("record: save a new session: %w", err)
	}
	if sc.cookie = findCookie(w.Result().Cookies(), cookieName); sc.cookie == nil {
		return sc, errors.New("record: the store set no cookie")
	}

	r, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://loadbench.invalid/", nil)
	if err != nil {
		return sc, err
	}
	r.AddCookie(&http.Cookie{Name: cookieName, Value: sc.cookie.Value})
	sc.load, err = rec.record(func() error {
		session, err = store.New(r, cookieName)
		return err
	})
	switch {
	case err != nil:
		return sc, fmt.Errorf("record: load the session: %w", err)
	case session.IsNew:
		return sc, errors.New("record: the session just saved did not load")
	}
	session.Values["counter"] = 1
	if sc.save, err = rec.record(func() error { return store.Save(r, httptest.NewRecorder(), session) }); err != nil {
		return sc, fmt.Errorf("record: save a changed session: %w", err)
	}
	return sc, nil
}

// fillSession gives session the values of user i: what a login handler
// would keep.
func fillSession(session *sessions.Session, i int) {
	session.Values["uid"] = 100_000 + i
	session.Values["name"] = firstNames[i%len(firstNames)] + " " + lastNames[i%len(lastNames)]
	session.Values["roles"] = []string{"member", "editor"}
	session.Values["loginAt"] = time.Now().UTC().Truncate(time.Second)
	session.Values["counter"] = 0
	session.AddFlash("Welcome back!")
}

var (
	firstNames = []string{"Alice", "Bob", "Chloé", "Dmitri", "Eve", "Fatima", "Grace", "Hiroshi", "Ines", "Jamal"}
	lastNames  = []string{"Martin", "Okafor", "Nguyen", "Schmidt", "García", "Kowalski", "Rossi", "Tanaka"}
)

func findCookie(cookies []*http.Cookie, name string) *http.Cookie {
	for _, c := range cookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// describe says what each step sent, for example "load: find {_id}".
func (sc storeCommands) describe() string {
	return fmt.Sprintf("create: %s; load: %s; save: %s", describeCommands(sc.create), describeCommands(sc.load), describeCommands(sc.save))
}

func describeCommands(cmds []command) string {
	if len(cmds) == 0 {
		return "nothing"
	}
	var parts []string
	for _, c := range cmds {
		d := c.name
		switch c.name {
		case "find":
			d += " " + describeKeys(c.body.Lookup("filter"))
			if p, ok := c.body.Lookup("projection").DocumentOK(); ok {
				d += " projection " + describeKeys(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: p})
			}
		case "findAndModify":
			d += " " + describeKeys(c.body.Lookup("query"))
			if u, ok := c.body.Lookup("update").DocumentOK(); ok {
				if elems, err := u.Elements(); err == nil {
					for _, e := range elems {
						d += " " + e.Key() + " " + describeKeys(e.Value())
					}
				}
			} else {
				d += " (update not a document)"
			}
			if isTrue(c.body.Lookup("new")) {
				d += ", returning the new document"
			} else {
				d += ", returning the pre-image"
			}
		case "insert", "delete", "update":
			if n := countArray(c.body.Lookup("documents")) + countArray(c.body.Lookup("deletes")) + countArray(c.body.Lookup("updates")); n != 1 {
				d += fmt.Sprintf(" (%d)", n)
			}
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, " + ")
}

// describeKeys lists a document's keys: {_id, expiresAt}.
func describeKeys(v bson.RawValue) string {
	return "{" + strings.Join(keysOf(v), ", ") + "}"
}

func keysOf(v bson.RawValue) []string {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil
	}
	keys := make([]string, len(elems))
	for i, e := range elems {
		keys[i] = e.Key()
	}
	return keys
}

func isTrue(v bson.RawValue) bool {
	b, ok := v.BooleanOK()
	return ok && b
}

func countArray(v bson.RawValue) int {
	a, ok := v.ArrayOK()
	if !ok {
		return 0
	}
	vals, err := a.Values()
	if err != nil {
		return 0
	}
	return len(vals)
}

// check compares the store's commands with the floor's: find {_id} for a
// load, findAndModify {_id} with an update document, no projection and
// the pre-image for a save. Differences the floor can live with are
// warnings; a save whose update the floor cannot copy is an error.
func (sc storeCommands) check() (warnings []string, err error) {
	only := []string{"_id"}
	switch {
	case len(sc.load) != 1 || sc.load[0].name != "find":
		warnings = append(warnings, fmt.Sprintf("the store's load sends %s; the floor's sends find {_id}", describeCommands(sc.load)))
	case !slices.Equal(keysOf(sc.load[0].body.Lookup("filter")), only):
		warnings = append(warnings, fmt.Sprintf("the store's load filters on %s; the floor's on {_id}", describeKeys(sc.load[0].body.Lookup("filter"))))
	case sc.load[0].body.Lookup("projection").Type != 0:
		warnings = append(warnings, "the store's load has a projection; the floor's has none")
	}
	var fam *command
	for i, c := range sc.save {
		if c.name == "findAndModify" {
			fam = &sc.save[i]
			break
		}
	}
	if fam == nil {
		return warnings, fmt.Errorf("the store's save sends %s, no findAndModify: the floor (findAndModify {_id} with the store's update) needs changing", describeCommands(sc.save))
	}
	if _, ok := fam.body.Lookup("update").DocumentOK(); !ok {
		return warnings, errors.New("the store's findAndModify has no update document: the floor needs changing")
	}
	if len(sc.save) != 1 {
		warnings = append(warnings, fmt.Sprintf("the store's save sends %s; the floor's sends one findAndModify", describeCommands(sc.save)))
	}
	if q := fam.body.Lookup("query"); !slices.Equal(keysOf(q), only) {
		warnings = append(warnings, fmt.Sprintf("the store's save filters on %s; the floor's on {_id}", describeKeys(q)))
	}
	if isTrue(fam.body.Lookup("new")) {
		warnings = append(warnings, "the store's save returns the new document; the floor's the pre-image")
	}
	if isTrue(fam.body.Lookup("upsert")) {
		warnings = append(warnings, "the store's save upserts; the floor's does not")
	}
	if fam.body.Lookup("fields").Type != 0 {
		warnings = append(warnings, "the store's save has a projection; the floor's has none")
	}
	return warnings, nil
}

// fieldKind says how the floor fills a field of its update.
type fieldKind int

const (
	kindCopy   fieldKind = iota // the store's value, as is
	kindBinary                  // random bytes of the same size and subtype
	kindDate                    // the request's time, plus the store's offset
)

// updateField is one field of the store's update, as the floor writes it.
type updateField struct {
	key     string
	kind    fieldKind
	value   bson.RawValue // kindCopy
	subtype byte          // kindBinary
	size    int           // kindBinary: the store's size
	offset  time.Duration // kindDate: from the time of the request
}

// updateOp is one operator of the update ($set) and its fields.
type updateOp struct {
	op     string
	fields []updateField
}

// updateTemplate is the store's update, to be filled by the floor for each
// request.
type updateTemplate []updateOp

// learnUpdate turns the update of the store's findAndModify into the
// floor's template: binary fields become random bytes of the same size,
// dates keep their distance to the time of the command (updatedAt now,
// expiresAt a lifetime later), anything else is copied.
func (sc storeCommands) learnUpdate() (updateTemplate, error) {
	for _, c := range sc.save {
		if c.name != "findAndModify" {
			continue
		}
		u, ok := c.body.Lookup("update").DocumentOK()
		if !ok {
			break
		}
		ops, err := u.Elements()
		if err != nil {
			return nil, fmt.Errorf("the store's update: %w", err)
		}
		var t updateTemplate
		for _, op := range ops {
			doc, ok := op.Value().DocumentOK()
			if !strings.HasPrefix(op.Key(), "$") || !ok {
				return nil, fmt.Errorf("the store's update is not made of operators ({%s: …}): the floor needs changing", op.Key())
			}
			fields, err := doc.Elements()
			if err != nil {
				return nil, fmt.Errorf("the store's update: %w", err)
			}
			o := updateOp{op: op.Key()}
			for _, f := range fields {
				uf := updateField{key: f.Key(), kind: kindCopy, value: f.Value()}
				if sub, data, ok := f.Value().BinaryOK(); ok {
					uf.kind, uf.subtype, uf.size = kindBinary, sub, len(data)
				} else if ms, ok := f.Value().DateTimeOK(); ok {
					uf.kind, uf.offset = kindDate, time.UnixMilli(ms).Sub(c.at).Round(time.Second)
				}
				o.fields = append(o.fields, uf)
			}
			t = append(t, o)
		}
		return t, nil
	}
	return nil, errors.New("the store's save sent no findAndModify with an update document")
}

// describe lists the template's fields: $set {v copied, data 120 B binary, …}.
func (t updateTemplate) describe() string {
	var parts []string
	for _, o := range t {
		var fields []string
		for _, f := range o.fields {
			switch f.kind {
			case kindBinary:
				fields = append(fields, fmt.Sprintf("%s %dB binary", f.key, f.size))
			case kindDate:
				switch {
				case f.offset > 0:
					fields = append(fields, fmt.Sprintf("%s now+%v", f.key, f.offset))
				case f.offset < 0:
					fields = append(fields, fmt.Sprintf("%s now%v", f.key, f.offset))
				default:
					fields = append(fields, f.key+" now")
				}
			default:
				fields = append(fields, f.key+" "+shortValue(f.value))
			}
		}
		parts = append(parts, o.op+" {"+strings.Join(fields, ", ")+"}")
	}
	return strings.Join(parts, " ")
}

// shortValue formats a copied value: a number or string as itself,
// anything else by its type.
func shortValue(v bson.RawValue) string {
	if n, ok := v.AsInt64OK(); ok {
		return fmt.Sprint(n)
	}
	if s, ok := v.StringValueOK(); ok && len(s) <= 16 {
		return fmt.Sprintf("%q", s)
	}
	return v.Type.String()
}

// payloads returns the binary values of the floor's update for one
// document: two sets, for the floor to alternate between, so that each
// save changes the data as the store's do. A binary field the document
// also has gets that field's size (the store writes values the size of
// what it stored), others the size the store sent.
func (t updateTemplate) payloads(doc bson.D) [2][][]any {
	sizes := map[string]int{}
	for _, e := range doc {
		if b, ok := e.Value.(bson.Binary); ok {
			sizes[e.Key] = len(b.Data)
		}
	}
	var p [2][][]any
	for i := range p {
		p[i] = make([][]any, len(t))
		for j, o := range t {
			p[i][j] = make([]any, len(o.fields))
			for k, f := range o.fields {
				if f.kind != kindBinary {
					continue
				}
				size := f.size
				if n, ok := sizes[f.key]; ok {
					size = n
				}
				p[i][j][k] = bson.Binary{Subtype: f.subtype, Data: randomBytes(size)}
			}
		}
	}
	return p
}

// build returns the update of one request at now, with the binary values
// of payloads.
func (t updateTemplate) build(payloads [][]any, now time.Time) bson.D {
	update := make(bson.D, len(t))
	for i, o := range t {
		fields := make(bson.D, len(o.fields))
		for j, f := range o.fields {
			var v any
			switch f.kind {
			case kindBinary:
				v = payloads[i][j]
			case kindDate:
				v = bson.NewDateTimeFromTime(now.Add(f.offset))
			default:
				v = f.value
			}
			fields[j] = bson.E{Key: f.key, Value: v}
		}
		update[i] = bson.E{Key: o.op, Value: fields}
	}
	return update
}

// readTemplates reads up to maxTemplates documents the store wrote, and the
// time it read them.
func readTemplates(ctx context.Context, coll *mongo.Collection) ([]bson.Raw, time.Time, error) {
	readAt := time.Now()
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetLimit(maxTemplates))
	if err != nil {
		return nil, readAt, fmt.Errorf("read the store's documents: %w", err)
	}
	defer cur.Close(ctx)
	var docs []bson.Raw
	for cur.Next(ctx) {
		docs = append(docs, slices.Clone(cur.Current))
	}
	if err := cur.Err(); err != nil {
		return nil, readAt, fmt.Errorf("read the store's documents: %w", err)
	}
	if len(docs) == 0 {
		return nil, readAt, errors.New("the store wrote no documents")
	}
	return docs, readAt, nil
}

// copyDocument returns a document shaped like tmpl: a fresh _id of the same
// type and size, random bytes of the same size in every binary field, each
// date at the same distance from now as it was from readAt, and every other
// value copied.
func copyDocument(tmpl bson.Raw, readAt, now time.Time) (bson.D, error) {
	elems, err := tmpl.Elements()
	if err != nil {
		return nil, fmt.Errorf("the store's document: %w", err)
	}
	doc := make(bson.D, 0, len(elems))
	hasID := false
	for _, e := range elems {
		v := e.Value()
		var nv any = v
		if e.Key() == "_id" {
			hasID = true
			if nv, err = newID(v); err != nil {
				return nil, err
			}
		} else if sub, data, ok := v.BinaryOK(); ok {
			nv = bson.Binary{Subtype: sub, Data: randomBytes(len(data))}
		} else if t, ok := v.TimeOK(); ok {
			nv = bson.NewDateTimeFromTime(now.Add(t.Sub(readAt)))
		}
		doc = append(doc, bson.E{Key: e.Key(), Value: nv})
	}
	if !hasID {
		return nil, errors.New("the store's documents have no _id")
	}
	return doc, nil
}

// newID returns a fresh _id like id: a string of random hex digits of the
// same length, random bytes of the same size, or a new ObjectID.
func newID(id bson.RawValue) (any, error) {
	if s, ok := id.StringValueOK(); ok {
		return hex.EncodeToString(randomBytes((len(s) + 1) / 2))[:len(s)], nil
	}
	if sub, data, ok := id.BinaryOK(); ok {
		return bson.Binary{Subtype: sub, Data: randomBytes(len(data))}, nil
	}
	if _, ok := id.ObjectIDOK(); ok {
		return bson.NewObjectID(), nil
	}
	return nil, fmt.Errorf("the store's documents have an _id of type %v, which the floor cannot copy", id.Type)
}

// randomCookie returns a random cookie value of n characters.
func randomCookie(n int) string {
	return base64.RawURLEncoding.EncodeToString(randomBytes(n))[:n]
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}
