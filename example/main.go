// Command example is a small login app whose sessions live in MongoDB,
// kept by mongostore.
//
// It serves a login form, a page for logged-in users that shows what the
// store keeps of their session (when it expires, how expired sessions are
// deleted, which server holds them), a page that lists their sessions on
// all their devices and ends any of them, and a logout button. With no
// database configured it starts an embedded MongoDB-compatible server
// (FerretDB with SQLite) whose files live in DATA_DIR, so it runs with
// nothing installed, and prints its address for mongosh: the same address
// at every start with the same DATA_DIR.
//
// Environment:
//
//	ADDR             address to listen on (default 127.0.0.1:8080)
//	MONGODB_URI      MongoDB server to use; unset: the embedded server
//	DATA_DIR         the embedded server's files and the session key file
//	                 (default .data, relative to the directory the app runs
//	                 in); the key file lives there even with MONGODB_URI
//	EMBEDDED_DB_ADDR the embedded server's address; unset: the one saved
//	                 in DATA_DIR at an earlier start, else 127.0.0.1:27018,
//	                 or a free port when that one is taken (saved for the
//	                 next starts)
//	DB_NAME          database name (default mongostore_example)
//	SESSION_KEY      hex key that signs session cookies, at least 32 bytes;
//	                 unset: a key generated at the first start and kept in
//	                 DATA_DIR/session.key (mode 0600), reused at later starts;
//	                 to rotate it, new,old (comma-separated, the new first)
//	SESSION_BLOCK_KEY hex key that encrypts the sessions' values at rest
//	                 (16, 24 or 32 bytes), one per SESSION_KEY key; unset:
//	                 not encrypted
//	SESSION_MAX_AGE  idle timeout of a session, a Go duration (default 24h)
//	COOKIE_SECURE    true: the cookies are Secure and the session cookie is
//	                 named __Host-session; set it behind HTTPS (default
//	                 false, for plain http://127.0.0.1)
//	DEMO_USERS       extra users, as name:password,name:password
//	MAX_SESSIONS_PER_USER
//	                 how many sessions one user may have at once, 0 to
//	                 1000: a login beyond it signs out the user's least
//	                 recently used session (default 0: no limit)
//	TRUSTED_PROXIES  the proxies in front of the app, IP addresses and CIDR
//	                 prefixes, comma-separated: the telemetry takes the
//	                 client's address from their X-Forwarded-For (default
//	                 none: the client is the TCP peer)
//	OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//	                 either set: a span for each request (and the store's
//	                 own) is sent there with OTLP over HTTP; the exporter
//	                 reads the other OTEL_EXPORTER_OTLP_* variables too
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
//	                 the telemetry's resource (default service.name
//	                 mongostore-example)
//
// The user demo with password demo always exists unless DEMO_USERS gives
// demo another password.
//
// GET /metrics serves the app's metrics, the store's among them, in the
// Prometheus text format (see startTelemetry).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/keyenv"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Defaults of the environment variables, and fixed settings.
const (
	defaultAddr     = "127.0.0.1:8080"
	defaultDataDir  = ".data" // relative to the working directory
	defaultDBName   = "mongostore_example"
	defaultMaxAge   = 24 * time.Hour
	maxSessionLimit = 1000 // the store lists at most 1,000 sessions of one owner
	collectionName  = "sessions"
	minKeyBytes     = 32
	startupTimeout  = 30 * time.Second // connecting and preparing the collection
	dbTimeout       = 5 * time.Second  // any one database operation of a request
	shutdownTimeout = 10 * time.Second // letting in-flight requests finish
	closeTimeout    = 10 * time.Second // disconnecting from the database
)

// config is the app's configuration: what the environment says, plus hooks
// for tests.
type config struct {
	// Addr is the TCP address to listen on (ADDR). Port 0 picks a free port.
	Addr string
	// MongoURI is the MongoDB connection string (MONGODB_URI). Empty starts
	// the embedded server with its files in DataDir.
	MongoURI string
	// DataDir holds the embedded server's files and, when SessionKey is
	// empty, the session key file (DATA_DIR).
	DataDir string
	// EmbeddedAddr is the embedded server's TCP address (EMBEDDED_DB_ADDR).
	// Empty: the address saved in DataDir at an earlier start, else
	// defaultEmbeddedAddr, or a free port when that one is taken (see
	// embeddedAddr). Port 0 picks a free port at each start.
	EmbeddedAddr string
	// DBName is the database that holds the sessions collection (DB_NAME).
	DBName string
	// SessionKeys are the store's key pairs, the current first
	// (SESSION_KEY, SESSION_BLOCK_KEY: hex, comma-separated; a rotation
	// lists the old pair after the new). Empty: the key kept in
	// DataDir/session.key, made at the first start.
	SessionKeys [][]byte
	// MaxAge is the sessions' idle timeout and cookie lifetime
	// (SESSION_MAX_AGE), a whole number of seconds.
	MaxAge time.Duration
	// CookieSecure makes the cookies Secure and names the session cookie
	// __Host-session (COOKIE_SECURE). Browsers then send them over HTTPS
	// only.
	CookieSecure bool
	// Users are the accounts that may log in: demo and DEMO_USERS.
	Users []credential
	// MaxSessionsPerUser is how many sessions one user may have at once
	// (MAX_SESSIONS_PER_USER; the store's Config.MaxSessionsPerOwner): a
	// login beyond it signs out the user's least recently used sessions.
	// 0: no limit.
	MaxSessionsPerUser int
	// TrustedProxies are the proxies whose X-Forwarded-For header the
	// telemetry believes, to record the client's address
	// (TRUSTED_PROXIES: IP addresses and CIDR prefixes, comma-separated).
	// None: the client is the TCP peer.
	TrustedProxies []netip.Prefix
	// OTLPTraces exports traces over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set; the exporter reads them).
	OTLPTraces bool

	// BcryptCost is the cost of the password hashes made at start. Zero
	// means bcrypt.DefaultCost; tests lower it.
	BcryptCost int
	// ClientOptions, if set, are applied after MongoURI when connecting, for
	// example to install a command monitor.
	ClientOptions *options.ClientOptions
	// OnListen, if set, is called with the app's base URL once it accepts
	// connections.
	OnListen func(url string)
}

// loadConfig reads the configuration from the environment through getenv.
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		Addr:         cmpOr(getenv("ADDR"), defaultAddr),
		MongoURI:     getenv("MONGODB_URI"),
		DataDir:      cmpOr(getenv("DATA_DIR"), defaultDataDir),
		EmbeddedAddr: getenv("EMBEDDED_DB_ADDR"),
		DBName:       cmpOr(getenv("DB_NAME"), defaultDBName),
		OTLPTraces: getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
			getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "",
	}
	var err error
	if hashKeys, blockKeys := getenv("SESSION_KEY"), getenv("SESSION_BLOCK_KEY"); hashKeys != "" {
		if cfg.SessionKeys, err = keyenv.Pairs(hashKeys, blockKeys); err != nil {
			return config{}, err
		}
	} else if blockKeys != "" {
		return config{}, errors.New("SESSION_BLOCK_KEY is set, SESSION_KEY is not: each block key goes with the hash key it is listed beside")
	}
	if cfg.MaxAge, err = parseMaxAge(getenv("SESSION_MAX_AGE")); err != nil {
		return config{}, fmt.Errorf("SESSION_MAX_AGE: %w", err)
	}
	if s := getenv("COOKIE_SECURE"); s != "" {
		if cfg.CookieSecure, err = strconv.ParseBool(s); err != nil {
			return config{}, fmt.Errorf("COOKIE_SECURE: %q is not true or false", s)
		}
	}
	if cfg.EmbeddedAddr != "" {
		if _, err := net.ResolveTCPAddr("tcp", cfg.EmbeddedAddr); err != nil {
			return config{}, fmt.Errorf("EMBEDDED_DB_ADDR: %w", err)
		}
	}
	if cfg.TrustedProxies, err = parseProxies(getenv("TRUSTED_PROXIES")); err != nil {
		return config{}, fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	if cfg.Users, err = parseUsers(getenv("DEMO_USERS")); err != nil {
		return config{}, fmt.Errorf("DEMO_USERS: %w", err)
	}
	if cfg.MaxSessionsPerUser, err = parseSessionLimit(getenv("MAX_SESSIONS_PER_USER")); err != nil {
		return config{}, fmt.Errorf("MAX_SESSIONS_PER_USER: %w", err)
	}
	return cfg, nil
}

// parseSessionLimit reads MAX_SESSIONS_PER_USER, s: a whole number from 0
// (no limit) to maxSessionLimit. An empty s gives 0.
func parseSessionLimit(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxSessionLimit {
		return 0, fmt.Errorf("%q is not a whole number from 0 (no limit) to %d", s, maxSessionLimit)
	}
	return n, nil
}

// parseMaxAge reads SESSION_MAX_AGE, s: a Go duration, a whole number of
// seconds of at least one. An empty s gives defaultMaxAge.
func parseMaxAge(s string) (time.Duration, error) {
	if s == "" {
		return defaultMaxAge, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < time.Second || d%time.Second != 0 {
		return 0, fmt.Errorf("%v is not a whole number of seconds of at least 1s", d)
	}
	return d, nil
}

// cmpOr returns s, or def if s is empty.
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func main() {
	os.Exit(mainCode())
}

// mainCode runs the app until SIGINT or SIGTERM and returns the exit code.
func mainCode() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example: configuration:", err)
		return 2
	}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 1
	}
	return 0
}

// run serves the app until ctx is cancelled, then shuts down gracefully:
// it stops accepting connections, lets in-flight requests finish, stops the
// store's GC goroutine, disconnects from the database and stops the embedded
// server, if any. It logs to stdout.
func run(ctx context.Context, cfg config, stdout io.Writer) error {
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	if err := serve(ctx, cfg, logger, stdout); err != nil {
		logger.Error("stopped", "error", err.Error())
		return err
	}
	logger.Info("stopped")
	return nil
}

// serve does the work of run; its deferred calls release, in reverse order
// of acquisition, everything it started.
func serve(ctx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) (err error) {
	keys, users, err := credentials(cfg, logger)
	if err != nil {
		return err
	}
	// Telemetry first, stopped last: the store reports into its providers.
	tel, err := startTelemetry(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, "stop telemetry", tel.shutdownWithin(ctx, closeTimeout)) }()
	startCtx, cancelStart := context.WithTimeout(ctx, startupTimeout)
	defer cancelStart()
	// Listen before the database starts, so that a taken ADDR fails at once.
	ln, err := listen(startCtx, cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close() // if the start fails; after a shutdown, already closed
	db, err := openDatabase(ctx, startCtx, cfg, logger, stdout)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, "", db.close(ctx)) }()
	store, activity, err := openStore(startCtx, cfg, db, keys, logger)
	if err != nil {
		return err
	}
	defer store.Close() // stops the GC goroutine; never fails
	handler, err := newApp(appOptions{
		Store: store, Users: users, SessionKey: keys[0], Logger: logger, Metrics: tel.Metrics,
		Server: db.server, Expiry: store.Expiry(), Absolute: absoluteTimeout(cfg.MaxAge),
		Activity: activity, MaxSessionsPerUser: cfg.MaxSessionsPerUser,
		Ping: func(ctx context.Context) error { return db.client.Ping(ctx, readpref.Primary()) },
	})
	if err != nil {
		return err
	}
	return serveHTTP(ctx, cfg, ln, tel.instrument(handler, ln.Addr().String()), logger)
}

// joinErr returns err joined with cerr, an error of the clean-up step
// what ("" when cerr says what it is), if cerr is not nil.
func joinErr(err error, what string, cerr error) error {
	if cerr == nil {
		return err
	}
	if what != "" {
		cerr = fmt.Errorf("%s: %w", what, cerr)
	}
	return errors.Join(err, cerr)
}

// credentials returns the store's key pairs (cfg.SessionKeys, or the key
// file's in cfg.DataDir) and the users who may log in.
func credentials(cfg config, logger *slog.Logger) ([][]byte, *userDB, error) {
	keys := cfg.SessionKeys
	if len(keys) == 0 {
		key, err := loadOrCreateKey(logger, cfg.DataDir)
		if err != nil {
			return nil, nil, fmt.Errorf("%w (or set SESSION_KEY)", err)
		}
		keys = [][]byte{key, nil}
	}
	users, err := newUserDB(cfg.Users, cfg.BcryptCost)
	if err != nil {
		return nil, nil, err
	}
	return keys, users, nil
}

// listen listens on addr (ADDR). When the address is taken, the error says
// which setting to change.
func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, listenError("", "ADDR", addr, err)
	}
	return ln, nil
}

// listenError is the error of a failed listen on addr, the value of the
// setting env, for the part of the app what ("" for the app itself): for
// a taken address, "listen on 127.0.0.1:8080: address already in use: set
// ADDR to another address".
func listenError(what, env, addr string, err error) error {
	prefix := "listen on " + addr
	if what != "" {
		prefix = what + ": " + prefix
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: %w: set %s to another address", prefix, syscall.EADDRINUSE, env)
	}
	return fmt.Errorf("%s (%s): %w", prefix, env, err)
}

// openStore makes the session store on the sessions collection of db,
// and the activity log that its lifecycle events feed (Config.OnEvent).
// Config.Expiry stays unset (ExpiryAuto): a TTL index where the server
// has them, the GC goroutine where it does not.
func openStore(ctx context.Context, cfg config, db *database, keys [][]byte, logger *slog.Logger) (*mongostore.Store, *activityLog, error) {
	coll := db.client.Database(cfg.DBName).Collection(collectionName)
	absolute := absoluteTimeout(cfg.MaxAge)
	activity := newActivityLog(activityPerUser, activityMaxUsers)
	store, err := mongostore.NewStore(ctx, coll, mongostore.Config{Logger: logger, AbsoluteTimeout: absolute,
		MaxSessionsPerOwner: cfg.MaxSessionsPerUser, OnEvent: activity.record}, keys...)
	if err != nil {
		return nil, nil, fmt.Errorf("session store: %w", err)
	}
	store.MaxAge(int(cfg.MaxAge / time.Second))
	store.Options.Secure = cfg.CookieSecure // with the default Path "/" and no Domain, as __Host- needs
	mode, _ := describeExpiry(store.Expiry())
	logger.Info("session store ready", "database", cfg.DBName, "collection", collectionName,
		"expiry", mode, "max_age", cfg.MaxAge.String(), "absolute_timeout", absolute.String(),
		"cookie_secure", cfg.CookieSecure, "max_sessions_per_user", cfg.MaxSessionsPerUser)
	if !cfg.CookieSecure {
		logger.Info("COOKIE_SECURE is off: cookies also travel over plain HTTP; set COOKIE_SECURE=true behind HTTPS")
	}
	return store, activity, nil
}

// serveHTTP serves handler on ln until ctx is cancelled, then shuts the
// server down: it stops accepting connections and lets in-flight requests
// finish, for shutdownTimeout at most.
func serveHTTP(ctx context.Context, cfg config, ln net.Listener, handler http.Handler, logger *slog.Logger) error {
	httpSrv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	url := baseURL(ln.Addr())
	logger.Info("listening on "+url, "url", url)
	if cfg.OnListen != nil {
		cfg.OnListen(url)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: finishing in-flight requests", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		_ = httpSrv.Close()
		<-serveErr
		return fmt.Errorf("shut down HTTP server: %w", err)
	}
	<-serveErr // http.ErrServerClosed
	return nil
}

// sessionLifetime is the longest a session lives from its creation,
// however active, unless its MaxAge is longer.
const sessionLifetime = 7 * 24 * time.Hour

// absoluteTimeout is the store's Config.AbsoluteTimeout for sessions with
// this MaxAge: a week, or maxAge if that is longer, so that a long MaxAge
// is honoured in full. (It is what the store does with the field unset;
// the app sets it to know it, for the home page.)
func absoluteTimeout(maxAge time.Duration) time.Duration {
	return max(sessionLifetime, maxAge)
}

// closeWithin calls close and waits at most d for it to return. After d it
// gives up, leaving close to finish in the background.
func closeWithin(d time.Duration, close func() error) error {
	done := make(chan error, 1)
	go func() { done <- close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("not done after %v", d)
	}
}

// baseURL returns the URL a browser on this machine uses to reach addr.
func baseURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(tcp.Port))
}

// describeServer says, for people, which server the connection string uri
// names: "MongoDB at host:port" (several hosts comma-separated; "(DNS seed
// list)" for mongodb+srv). It never returns credentials: the user name and
// password, the database and the options are left out, and a string it
// cannot read gives a generic description.
func describeServer(uri string) string {
	const unknown = "the MongoDB server in MONGODB_URI"
	rest, srv := strings.CutPrefix(uri, "mongodb+srv://")
	if !srv {
		var ok bool
		if rest, ok = strings.CutPrefix(uri, "mongodb://"); !ok {
			return unknown
		}
	}
	// As the driver reads it: user information ends at the first "@" (any
	// later "@" must be escaped), and the hosts at the next "/" or "?".
	if _, after, ok := strings.Cut(rest, "@"); ok {
		rest = after
	}
	hosts := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		hosts = rest[:i]
	}
	list := strings.Split(hosts, ",")
	for i, h := range list {
		h, err := url.QueryUnescape(h) // a Unix socket's path is escaped
		if err != nil || !validHost(h) {
			return unknown
		}
		list[i] = h
	}
	desc := "MongoDB at " + strings.Join(list, ", ")
	if srv {
		desc += " (DNS seed list)"
	}
	return desc
}

// validHost reports whether h is a host name or IP address, optionally
// with a port, or the path of a Unix socket.
func validHost(h string) bool {
	if strings.HasPrefix(h, "/") && strings.HasSuffix(h, ".sock") {
		return true
	}
	host := h
	if hp, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
		host = hp
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil {
		return true
	}
	if host == "" {
		return false
	}
	for _, r := range host {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}
