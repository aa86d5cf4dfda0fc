package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}

	cfg, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	// No SESSION_KEY: serve takes the key from DATA_DIR (loadOrCreateKey).
	if cfg.Addr != defaultAddr || cfg.MongoURI != "" || cfg.DataDir != ".data" || cfg.DBName != "mongostore_example" ||
		cfg.MaxAge != 24*time.Hour || cfg.SessionKeys != nil || cfg.CookieSecure || cfg.OTLPTraces || cfg.MaxSessionsPerUser != 0 ||
		len(cfg.Users) != 1 || cfg.Users[0] != (credential{"demo", "demo"}) {
		t.Errorf("defaults: %+v", cfg)
	}

	key := strings.Repeat("ab", 32)
	cfg, err = loadConfig(env(map[string]string{
		"ADDR": "127.0.0.1:0", "MONGODB_URI": "mongodb://db:27017", "DATA_DIR": "/var/lib/x", "DB_NAME": "app",
		"SESSION_KEY": key, "SESSION_MAX_AGE": "90m", "COOKIE_SECURE": "true",
		"DEMO_USERS":       "alice:wonder:land, bob:builder,demo:secret",
		"EMBEDDED_DB_ADDR": "127.0.0.1:27999", "TRUSTED_PROXIES": "10.0.0.0/8, ::1 ,192.168.1.7,::ffff:172.16.0.1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:0" || cfg.MongoURI != "mongodb://db:27017" || cfg.DataDir != "/var/lib/x" || cfg.DBName != "app" ||
		len(cfg.SessionKeys) != 2 || !bytes.Equal(cfg.SessionKeys[0], bytes.Repeat([]byte{0xab}, 32)) || cfg.SessionKeys[1] != nil || cfg.MaxAge != 90*time.Minute || !cfg.CookieSecure ||
		cfg.EmbeddedAddr != "127.0.0.1:27999" {
		t.Errorf("from the environment: %+v", cfg)
	}
	if got, want := fmt.Sprint(cfg.TrustedProxies), "[10.0.0.0/8 ::1/128 192.168.1.7/32 172.16.0.1/32]"; got != want {
		t.Errorf("TRUSTED_PROXIES: %s, want %s", got, want)
	}
	for name, want := range map[string]bool{"OTEL_EXPORTER_OTLP_ENDPOINT": true, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": true, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": false} {
		if cfg, err := loadConfig(env(map[string]string{name: "http://127.0.0.1:4318"})); err != nil || cfg.OTLPTraces != want {
			t.Errorf("%s set: OTLPTraces %v, %v; want %v", name, cfg.OTLPTraces, err, want)
		}
	}
	for v, want := range map[string]bool{"1": true, "TRUE": true, "false": false, "0": false} {
		if cfg, err := loadConfig(env(map[string]string{"COOKIE_SECURE": v})); err != nil || cfg.CookieSecure != want {
			t.Errorf("COOKIE_SECURE=%s: %v, %v; want %v", v, cfg.CookieSecure, err, want)
		}
	}
	wantUsers := []credential{{"demo", "secret"}, {"alice", "wonder:land"}, {"bob", "builder"}}
	if len(cfg.Users) != len(wantUsers) {
		t.Fatalf("users %v, want %v", cfg.Users, wantUsers)
	}
	for i := range wantUsers {
		if cfg.Users[i] != wantUsers[i] {
			t.Errorf("user %d: %v, want %v", i, cfg.Users[i], wantUsers[i])
		}
	}

	// A rotation: the new pair first, the old after it.
	old, block := strings.Repeat("cd", 40), strings.Repeat("ef", 32)
	if cfg, err := loadConfig(env(map[string]string{"SESSION_KEY": key + "," + old, "SESSION_BLOCK_KEY": block})); err != nil ||
		len(cfg.SessionKeys) != 4 || len(cfg.SessionKeys[1]) != 32 || len(cfg.SessionKeys[2]) != 40 || cfg.SessionKeys[3] != nil {
		t.Errorf("SESSION_KEY=new,old with a block key for the new: %d key parts, %v", len(cfg.SessionKeys), err)
	}

	for name, tc := range map[string]struct{ env map[string]string }{
		"key not hex":         {map[string]string{"SESSION_KEY": "zz" + key}},
		"old key not hex":     {map[string]string{"SESSION_KEY": key + ",zz" + key}},
		"block key, no key":   {map[string]string{"SESSION_BLOCK_KEY": key}},
		"block key too short": {map[string]string{"SESSION_KEY": key, "SESSION_BLOCK_KEY": "abcd"}},
		"more block keys":     {map[string]string{"SESSION_KEY": key, "SESSION_BLOCK_KEY": key + "," + key}},
		"key too short":       {map[string]string{"SESSION_KEY": strings.Repeat("ab", 31)}},
		"max age not a time":  {map[string]string{"SESSION_MAX_AGE": "1 day"}},
		"max age too short":   {map[string]string{"SESSION_MAX_AGE": "500ms"}},
		"max age fractional":  {map[string]string{"SESSION_MAX_AGE": "1.5s"}},
		"max age negative":    {map[string]string{"SESSION_MAX_AGE": "-1h"}},
		"cookie secure yes":   {map[string]string{"COOKIE_SECURE": "yes"}},
		"user no password":    {map[string]string{"DEMO_USERS": "alice"}},
		"user no colon":       {map[string]string{"DEMO_USERS": "alice=Tr0ub4dor&3"}},
		"password with comma": {map[string]string{"DEMO_USERS": "alice:Tr0ub,4dor&3"}},
		"user empty pass":     {map[string]string{"DEMO_USERS": "alice:"}},
		"user bad name":       {map[string]string{"DEMO_USERS": "a b:c"}},
		"user twice":          {map[string]string{"DEMO_USERS": "alice:x,alice:y"}},
		"password too long":   {map[string]string{"DEMO_USERS": "alice:" + strings.Repeat("x", 73)}},
		"embedded no port":    {map[string]string{"EMBEDDED_DB_ADDR": "127.0.0.1"}},
		"proxy not an IP":     {map[string]string{"TRUSTED_PROXIES": "10.0.0.1, proxy.example"}},
		"proxy bad prefix":    {map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"}},
	} {
		if cfg, err := loadConfig(env(tc.env)); err == nil {
			t.Errorf("%s: no error, config %+v", name, cfg)
		} else if strings.Contains(err.Error(), "Tr0ub4dor") {
			t.Errorf("%s: the error repeats the password: %v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestLoadConfigSessionLimit checks MAX_SESSIONS_PER_USER: a whole number
// from 0 (no limit, the default) to 1000.
func TestLoadConfigSessionLimit(t *testing.T) {
	for v, want := range map[string]int{"": 0, "0": 0, "1": 1, "3": 3, "1000": 1000} {
		cfg, err := loadConfig(func(k string) string { return map[string]string{"MAX_SESSIONS_PER_USER": v}[k] })
		if err != nil || cfg.MaxSessionsPerUser != want {
			t.Errorf("MAX_SESSIONS_PER_USER=%q: %v, %v; want %v", v, cfg.MaxSessionsPerUser, err, want)
		}
	}
	for _, v := range []string{"two", "-1", "1.5", "1001", " 2", "2 ", "0x10", "99999999999999999999"} {
		_, err := loadConfig(func(k string) string { return map[string]string{"MAX_SESSIONS_PER_USER": v}[k] })
		want := fmt.Sprintf("MAX_SESSIONS_PER_USER: %q is not a whole number from 0 (no limit) to 1000", v)
		if err == nil || err.Error() != want {
			t.Errorf("MAX_SESSIONS_PER_USER=%q: error %v, want %q", v, err, want)
		}
	}
}

func TestUserDB(t *testing.T) {
	db, err := newUserDB([]credential{{"demo", "demo"}, {"alice", "wonderland"}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, password string
		ok             bool
	}{
		{"demo", "demo", true},
		{"alice", "wonderland", true},
		{"alice", "demo", false},
		{"Demo", "demo", false},
		{"nobody", "demo", false},
		{"", "", false},
		{"demo", strings.Repeat("demo", 30), false},
	} {
		if got := db.authenticate(tc.name, tc.password); got != tc.ok {
			t.Errorf("authenticate(%q, %q) = %v, want %v", tc.name, tc.password, got, tc.ok)
		}
	}
	for name, h := range db.hashes {
		if bytes.Contains(h, []byte("demo")) || bytes.Contains(h, []byte("wonderland")) || !bytes.HasPrefix(h, []byte("$2a$")) {
			t.Errorf("hash of %s does not look like bcrypt: %s", name, h)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"0.0.0.0:80":     "http://localhost:80",
		"[::1]:8080":     "http://[::1]:8080",
		"[::]:8080":      "http://localhost:8080",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := baseURL(a); got != want {
			t.Errorf("baseURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	valid := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name    string
		content string // of the key file before the start; "" for none
		wantErr string // in the error; "" for success
	}{
		{name: "no file: a new key"},
		{name: "saved key", content: valid + "\n"},
		{name: "saved key, white space and upper case", content: "  " + strings.ToUpper(valid) + "\r\n\n"},
		{name: "longer key", content: valid + valid},
		{name: "not hex", content: "zz" + valid[2:], wantErr: "not hexadecimal"},
		{name: "too short", content: valid[:62], wantErr: "31 bytes, want at least 32"},
		{name: "empty", content: "\n", wantErr: "0 bytes, want at least 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data") // not there yet
			path := filepath.Join(dir, keyFileName)
			if tc.content != "" {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			key, err := loadOrCreateKey(slog.New(slog.NewTextHandler(&logs, nil)), dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("error %v, want one naming %s and saying %q", err, path, tc.wantErr)
				}
				if got, _ := os.ReadFile(path); string(got) != tc.content {
					t.Errorf("the bad key file was changed to %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(key) < minKeyBytes {
				t.Fatalf("key of %d bytes", len(key))
			}
			if strings.Contains(logs.String(), hex.EncodeToString(key)) {
				t.Errorf("the key is in the log:\n%s", logs.String())
			}
			if !strings.Contains(logs.String(), "file="+path) {
				t.Errorf("the log does not say where the key is:\n%s", logs.String())
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.content == "" {
				if want := hex.EncodeToString(key) + "\n"; string(data) != want {
					t.Errorf("key file holds %q, want %q", data, want)
				}
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
				}
				if !strings.Contains(logs.String(), "generated a session key") {
					t.Errorf("the log does not say the key is new:\n%s", logs.String())
				}
			} else if string(data) != tc.content {
				t.Errorf("the key file was rewritten: %q", data)
			}

			// The next start uses the same key.
			logs.Reset()
			again, err := loadOrCreateKey(slog.New(slog.NewTextHandler(&logs, nil)), dir)
			if err != nil || !bytes.Equal(again, key) {
				t.Fatalf("second start: key equal %v, error %v", bytes.Equal(again, key), err)
			}
			if !strings.Contains(logs.String(), "using the session key saved in") {
				t.Errorf("second start's log:\n%s", logs.String())
			}
		})
	}

	t.Run("loose permissions", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, keyFileName), []byte(valid), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, keyFileName), 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
		var logs bytes.Buffer
		if _, err := loadOrCreateKey(slog.New(slog.NewTextHandler(&logs, nil)), dir); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "chmod 600") {
			t.Errorf("no warning about a key file others can read:\n%s", logs.String())
		}
	})

	t.Run("data dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadOrCreateKey(slog.New(slog.DiscardHandler), file); err == nil {
			t.Fatal("no error")
		} else {
			t.Log(err)
		}
	})
}

func TestDescribeServer(t *testing.T) {
	const unknown = "the MongoDB server in MONGODB_URI"
	for _, tc := range []struct{ uri, want string }{
		{"mongodb://127.0.0.1:27017/", "MongoDB at 127.0.0.1:27017"},
		{"mongodb://localhost", "MongoDB at localhost"},
		{"mongodb://db.example.com:27017/app?replicaSet=rs0", "MongoDB at db.example.com:27017"},
		{"mongodb://user:secret@db1:27017,db2:27018/app?authSource=admin", "MongoDB at db1:27017, db2:27018"},
		{"mongodb://user:p%40ss%2Fw0rd@db:27017/", "MongoDB at db:27017"},
		{"mongodb://secretuser@db/", "MongoDB at db"},
		{"mongodb+srv://user:secret@cluster0.abcde.mongodb.net/?retryWrites=true", "MongoDB at cluster0.abcde.mongodb.net (DNS seed list)"},
		{"mongodb://[::1]:27017/", "MongoDB at [::1]:27017"},
		{"mongodb://%2Ftmp%2Fmongodb-27017.sock", "MongoDB at /tmp/mongodb-27017.sock"},
		{"mongodb://user:secret/x@db/", "MongoDB at db"}, // the driver refuses it; still no credentials
		// Anything odd gives no details.
		{"mongodb://user:secret", unknown},
		{"mongodb://user:99999/", unknown},
		{"mongodb://db:27017:secret/", unknown},
		{"mongodb://db with secret/", unknown},
		{"mongodb://", unknown},
		{"postgres://user:secret@db/", unknown},
		{"", unknown},
	} {
		got := describeServer(tc.uri)
		if got != tc.want {
			t.Errorf("describeServer(%q) = %q, want %q", tc.uri, got, tc.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "user") {
			t.Errorf("describeServer(%q) = %q: shows credentials", tc.uri, got)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Hour, "less than a minute"},
		{0, "less than a minute"},
		{29 * time.Second, "less than a minute"},
		{30 * time.Second, "1m"},
		{24*time.Hour - 1500*time.Millisecond, "1d"},
		{24*time.Hour - 31*time.Second, "23h59m"},
		{2 * time.Hour, "2h"},
		{7*24*time.Hour - time.Minute, "6d23h59m"},
		{30 * 24 * time.Hour, "30d"},
		{26*time.Hour + 5*time.Minute, "1d2h5m"},
	} {
		if got := humanDuration(tc.d); got != tc.want {
			t.Errorf("humanDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestBreakAfterSlashes(t *testing.T) {
	for in, want := range map[string]string{
		"MongoDB at 127.0.0.1:27017":           "MongoDB at 127.0.0.1:27017",
		"embedded FerretDB (SQLite) in /a/b/c": "embedded FerretDB (SQLite) in /a/<wbr>b/<wbr>c",
		"/srv/data/":                           "/srv/<wbr>data/<wbr>",
		"relative/dir <x>&":                    "relative/<wbr>dir &lt;x&gt;&amp;",
		"":                                     "",
	} {
		if got := string(breakAfterSlashes(in)); got != want {
			t.Errorf("breakAfterSlashes(%q) = %q, want %q", in, got, want)
		}
	}
}
