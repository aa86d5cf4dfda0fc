package loadbench

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/serverinfo"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
)

const (
	cookieName  = "session"
	insertBatch = 1000 // floor documents per InsertMany
)

// okBody is the body of every successful response.
var okBody = []byte("ok\n")

// bench is everything a run sets up: the database, the store, the HTTP
// server and its users.
type bench struct {
	s       settings
	server  serverinfo.Info
	client  *mongo.Client
	coll    *mongo.Collection
	store   *mongostore.Store
	floor   *floor
	cmds    storeCommands
	http    *http.Server
	served  chan error // Serve's result
	baseURL string
	tr      *http.Transport
	// clients holds each variant's users: one client, with its own cookie
	// jar and session, per user.
	clients map[string][]*http.Client
	peers   []*openPeer
}

// openPeer is a peer whose store is open.
type openPeer struct {
	Peer
	store sessions.Store
	coll  string // its collection, in the same database
	close func(context.Context) error
}

// setUp connects, creates the store, records its commands, starts the HTTP
// server and creates every user's sessions. The bench it returns, even
// with an error, is to be closed.
func setUp(ctx context.Context, s settings, out io.Writer) (*bench, error) {
	b := &bench{s: s, clients: map[string][]*http.Client{}}
	var err error
	if b.client, err = mongo.Connect(options.Client().ApplyURI(s.uri)); err != nil {
		return b, fmt.Errorf("connect: %w", err)
	}
	if b.server, err = serverinfo.Describe(ctx, b.client); err != nil {
		return b, err
	}
	fmt.Fprintf(out, "server: %s\n", b.server)

	name := s.collPrefix + "loadbench_" + hex.EncodeToString(randomBytes(4))
	b.coll = b.client.Database(s.db).Collection(name)
	keys := [][]byte{randomBytes(32)}
	if s.encrypt {
		keys = append(keys, randomBytes(32))
	}
	cfg := mongostore.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if b.store, err = mongostore.NewStore(ctx, b.coll, cfg, keys...); err != nil {
		return b, fmt.Errorf("new store: %w", err)
	}
	cookies := "signed"
	if s.encrypt {
		cookies = "signed and encrypted"
	}
	fmt.Fprintf(out, "collection %s.%s, expiry mode %s, cookies %s\n", s.db, name, b.store.ExpiryMode(), cookies)

	// What the store sends, recorded on a client of its own.
	if b.cmds, err = recordStore(ctx, s, name, cfg, keys); err != nil {
		return b, err
	}
	fmt.Fprintf(out, "store commands: %s\n", b.cmds.describe())
	warnings, err := b.cmds.check()
	for _, w := range warnings {
		fmt.Fprintf(out, "WARNING: %s\n", w)
	}
	if err != nil {
		return b, err
	}
	update, err := b.cmds.learnUpdate()
	if err != nil {
		return b, err
	}
	b.floor = &floor{coll: b.coll, update: update, cookieOpts: *b.store.Options}

	for _, p := range s.peers {
		op := &openPeer{Peer: p, coll: s.collPrefix + "loadbench_" + p.Name + "_" + hex.EncodeToString(randomBytes(4))}
		op.store, op.close, err = p.Open(ctx, PeerConfig{URI: s.uri, DB: s.db, Collection: op.coll, Keys: keys, MaxAge: b.store.Options.MaxAge, Out: out})
		b.peers = append(b.peers, op) // close drops its collection, even now
		if err != nil {
			op.close = nil // Open released what it had
			return b, fmt.Errorf("open peer %s: %w", p.Name, err)
		}
		fmt.Fprintf(out, "peer %s: %s; collection %s.%s\n", p.Name, p.About, s.db, op.coll)
	}

	if err := b.serve(ctx); err != nil {
		return b, err
	}
	b.tr = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: s.users + 4, // every user keeps its connection
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	for _, v := range s.variants {
		for range s.users {
			jar, err := cookiejar.New(nil)
			if err != nil {
				return b, fmt.Errorf("cookie jar: %w", err)
			}
			b.clients[v] = append(b.clients[v], &http.Client{
				Transport: b.tr,
				Jar:       jar,
				CheckRedirect: func(*http.Request, []*http.Request) error {
					return http.ErrUseLastResponse
				},
			})
		}
	}

	// The users' sessions: through the store (Get, values, Save), the
	// middleware (a new session, values, saved on the way out) and each
	// peer (Get, values, Save), over HTTP, as a login would.
	for _, v := range b.s.variants {
		if v == variantFloor {
			continue
		}
		for i, c := range b.clients[v] {
			if err := b.login(ctx, c, v, i); err != nil {
				return b, err
			}
		}
	}
	if b.clients[variantFloor] != nil {
		if err := b.setUpFloor(ctx, out); err != nil {
			return b, err
		}
	}
	fmt.Fprintf(out, "http: %s; %d users per variant\n", b.baseURL, s.users)
	return b, nil
}

// serve starts the HTTP server on a loopback port.
func (b *bench) serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	b.baseURL = "http://" + ln.Addr().String()
	b.http = &http.Server{
		Handler:           b.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	b.served = make(chan error, 1)
	go func() { b.served <- b.http.Serve(ln) }()
	return nil
}

// routes are the handlers: /login/{store,middleware,PEER}?u=N create user
// N's session; /{rw,ro}/{floor,store,middleware,PEER} are the measured
// variants. The store and the peers have the same handlers (getSave).
func (b *bench) routes() http.Handler {
	mux := http.NewServeMux()
	mw := b.store.Middleware(cookieName, mongostore.MiddlewareOptions{})
	mux.Handle("GET /login/middleware", mw(http.HandlerFunc(loginMiddleware)))
	mux.HandleFunc("GET /rw/floor", b.floor.readWrite)
	mux.HandleFunc("GET /ro/floor", b.floor.read)
	mux.Handle("GET /rw/middleware", mw(http.HandlerFunc(middlewareReadWrite)))
	mux.Handle("GET /ro/middleware", mw(http.HandlerFunc(middlewareRead)))
	stores := map[string]sessions.Store{variantStore: b.store}
	for _, p := range b.peers {
		stores[p.Name] = p.store
	}
	for name, store := range stores {
		g := getSave{store}
		mux.HandleFunc("GET /login/"+name, g.login)
		mux.HandleFunc("GET /rw/"+name, g.readWrite)
		mux.HandleFunc("GET /ro/"+name, g.read)
	}
	return mux
}

// login creates user i's session for variant v.
func (b *bench) login(ctx context.Context, c *http.Client, v string, i int) error {
	if err := get(ctx, c, b.baseURL+"/login/"+v+"?u="+strconv.Itoa(i)); err != nil {
		return fmt.Errorf("log user %d in (%s): %w", i, v, err)
	}
	u, err := url.Parse(b.baseURL)
	if err != nil {
		return err
	}
	if findCookie(c.Jar.Cookies(u), cookieName) == nil {
		return fmt.Errorf("log user %d in (%s): no session cookie", i, v)
	}
	return nil
}

func userIndex(r *http.Request) (int, bool) {
	i, err := strconv.Atoi(r.URL.Query().Get("u"))
	return i, err == nil && i >= 0
}

// getSave are the handlers of a variant that uses a store's Get and
// session.Save: the store's, and the peers'.
type getSave struct{ store sessions.Store }

// login creates a session with Get and Save.
func (g getSave) login(w http.ResponseWriter, r *http.Request) {
	i, ok := userIndex(r)
	if !ok {
		http.Error(w, "no user", http.StatusBadRequest)
		return
	}
	session, err := g.store.Get(r, cookieName)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fillSession(session, i)
	if err := session.Save(r, w); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeOK(w)
}

// loginMiddleware fills the middleware's new session, which it then saves.
func loginMiddleware(w http.ResponseWriter, r *http.Request) {
	i, ok := userIndex(r)
	if !ok {
		http.Error(w, "no user", http.StatusBadRequest)
		return
	}
	fillSession(mongostore.Session(r, cookieName), i)
	writeOK(w)
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(okBody)
}

// loaded checks that the request's session is the user's stored one.
func loaded(w http.ResponseWriter, session *sessions.Session) bool {
	if session == nil || session.IsNew {
		http.Error(w, "session not loaded", http.StatusUnauthorized)
		return false
	}
	if session.Values["uid"] == nil {
		http.Error(w, "session has no uid", http.StatusInternalServerError)
		return false
	}
	return true
}

// increment changes the session: one more visit. It takes the counter
// back in whatever numeric type the codec gives.
func increment(session *sessions.Session) {
	var n int64
	switch v := session.Values["counter"].(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case float64:
		n = int64(v)
	}
	session.Values["counter"] = int(n + 1)
}

// read loads the session (Get).
func (g getSave) read(w http.ResponseWriter, r *http.Request) {
	session, err := g.store.Get(r, cookieName)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if loaded(w, session) {
		writeOK(w)
	}
}

// readWrite loads the session (Get), changes it and saves it.
func (g getSave) readWrite(w http.ResponseWriter, r *http.Request) {
	session, err := g.store.Get(r, cookieName)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !loaded(w, session) {
		return
	}
	increment(session)
	if err := session.Save(r, w); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeOK(w)
}

func middlewareRead(w http.ResponseWriter, r *http.Request) {
	if loaded(w, mongostore.Session(r, cookieName)) {
		writeOK(w)
	}
}

func middlewareReadWrite(w http.ResponseWriter, r *http.Request) {
	session := mongostore.Session(r, cookieName)
	if loaded(w, session) {
		increment(session)
		writeOK(w)
	}
}

// floor is the bare-driver variant: the store's commands on documents
// shaped like the store's, and nothing else.
type floor struct {
	coll       *mongo.Collection
	update     updateTemplate
	cookieOpts sessions.Options // the store's default options
	// users maps a cookie value to its user; set once, before the floor
	// is measured.
	users atomic.Pointer[map[string]*floorUser]
}

// floorUser is the floor's session of one user.
type floorUser struct {
	id       any // the document's _id
	cookie   string
	payloads [2][][]any // the update's binary values, alternately
	saves    atomic.Uint32
}

// setUpFloor inserts the floor's documents, copied from the store's, and
// gives each floor user the cookie of one.
func (b *bench) setUpFloor(ctx context.Context, out io.Writer) error {
	templates, readAt, err := readTemplates(ctx, b.coll)
	if err != nil {
		return err
	}
	users := make(map[string]*floorUser, b.s.users)
	docs := make([]any, 0, b.s.users)
	size := 0
	now := time.Now()
	for i := range b.s.users {
		doc, err := copyDocument(templates[i%len(templates)], readAt, now)
		if err != nil {
			return err
		}
		raw, err := bson.Marshal(doc)
		if err != nil {
			return fmt.Errorf("floor document: %w", err)
		}
		size += len(raw)
		u := &floorUser{cookie: randomCookie(len(b.cmds.cookie.Value)), payloads: b.floor.update.payloads(doc)}
		for _, e := range doc {
			if e.Key == "_id" {
				u.id = e.Value
			}
		}
		users[u.cookie] = u
		docs = append(docs, doc)
	}
	for start := 0; start < len(docs); start += insertBatch {
		if _, err := b.coll.InsertMany(ctx, docs[start:min(start+insertBatch, len(docs))]); err != nil {
			return fmt.Errorf("insert the floor's documents: %w", err)
		}
	}
	base, err := url.Parse(b.baseURL)
	if err != nil {
		return err
	}
	i := 0
	for _, u := range users {
		b.clients[variantFloor][i].Jar.SetCookies(base, []*http.Cookie{{Name: cookieName, Value: u.cookie, Path: "/"}})
		i++
	}
	b.floor.users.Store(&users)
	first, _ := templates[0].Elements()
	keys := make([]string, len(first))
	for i, e := range first {
		keys[i] = e.Key()
	}
	tmplSize := 0
	for _, t := range templates {
		tmplSize += len(t)
	}
	fmt.Fprintf(out, "floor: %d documents copied from %d of the store's {%s}, %d bytes on average (the store's: %d); update %s; cookies of %d characters\n",
		len(docs), len(templates), strings.Join(keys, ", "), size/len(docs), tmplSize/len(templates), b.floor.update.describe(), len(b.cmds.cookie.Value))
	return nil
}

// user returns the floor user whose cookie the request carries.
func (f *floor) user(w http.ResponseWriter, r *http.Request) (*floorUser, bool) {
	c, err := r.Cookie(cookieName)
	if users := f.users.Load(); err == nil && users != nil {
		if u := (*users)[c.Value]; u != nil {
			return u, true
		}
	}
	http.Error(w, "no session", http.StatusUnauthorized)
	return nil, false
}

// find is the store's load: FindOne({_id}).
func (f *floor) find(w http.ResponseWriter, r *http.Request, u *floorUser) bool {
	_, err := f.coll.FindOne(r.Context(), bson.D{{Key: "_id", Value: u.id}}).Raw()
	if err != nil {
		http.Error(w, "find: "+err.Error(), http.StatusInternalServerError)
		return false
	}
	return true
}

func (f *floor) read(w http.ResponseWriter, r *http.Request) {
	if u, ok := f.user(w, r); ok && f.find(w, r, u) {
		writeOK(w)
	}
}

// readWrite is the store's load and save: FindOne({_id}), then
// FindOneAndUpdate({_id}, the store's update, pre-image), and the cookie.
func (f *floor) readWrite(w http.ResponseWriter, r *http.Request) {
	u, ok := f.user(w, r)
	if !ok || !f.find(w, r, u) {
		return
	}
	update := f.update.build(u.payloads[u.saves.Add(1)%2], time.Now())
	_, err := f.coll.FindOneAndUpdate(r.Context(), bson.D{{Key: "_id", Value: u.id}}, update,
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	if err != nil {
		http.Error(w, "findAndModify: "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, sessions.NewCookie(cookieName, u.cookie, &f.cookieOpts))
	writeOK(w)
}

// get sends one GET request with c and reads the whole response; anything
// but 200 is an error.
func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: read the response: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body[:min(len(body), 300)])))
	}
	return nil
}

// close stops the HTTP server and the store, drops the collection and
// disconnects, within bounds of their own, even when ctx is done.
func (b *bench) close(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if b.http != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := b.http.Shutdown(sctx); err != nil {
			_ = b.http.Close()
		}
		cancel()
		if err := <-b.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http server: %w", err))
		}
	}
	if b.tr != nil {
		b.tr.CloseIdleConnections()
	}
	if b.store != nil {
		_ = b.store.Close()
	}
	for _, p := range b.peers {
		if p.close != nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := p.close(cctx); err != nil {
				errs = append(errs, fmt.Errorf("close peer %s: %w", p.Name, err))
			}
			cancel()
		}
	}
	colls := []*mongo.Collection{b.coll}
	for _, p := range b.peers {
		if b.coll != nil {
			colls = append(colls, b.coll.Database().Collection(p.coll))
		}
	}
	for _, c := range colls {
		if c == nil {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.Drop(dctx); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", c.Name(), err))
		}
		cancel()
	}
	if b.client != nil {
		disconnect(ctx, b.client)
	}
	return errors.Join(errs...)
}

// disconnect disconnects client within a bound of its own.
func disconnect(ctx context.Context, client *mongo.Client) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = client.Disconnect(dctx)
}
