package main

import (
	"bytes"
	"net"
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
	if cfg.Addr != defaultAddr || cfg.MongoURI != "" || cfg.DataDir != ".data" || cfg.DBName != "mongostore_example" ||
		cfg.MaxAge != 24*time.Hour || !cfg.KeyGenerated || len(cfg.SessionKey) != 32 ||
		len(cfg.Users) != 1 || cfg.Users[0] != (credential{"demo", "demo"}) {
		t.Errorf("defaults: %+v", cfg)
	}
	other, _ := loadConfig(env(nil))
	if bytes.Equal(cfg.SessionKey, other.SessionKey) {
		t.Error("two generated keys are equal")
	}

	key := strings.Repeat("ab", 32)
	cfg, err = loadConfig(env(map[string]string{
		"ADDR": "127.0.0.1:0", "MONGODB_URI": "mongodb://db:27017", "DATA_DIR": "/var/lib/x", "DB_NAME": "app",
		"SESSION_KEY": key, "SESSION_MAX_AGE": "90m", "DEMO_USERS": "alice:wonder:land, bob:builder,demo:secret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:0" || cfg.MongoURI != "mongodb://db:27017" || cfg.DataDir != "/var/lib/x" || cfg.DBName != "app" ||
		cfg.KeyGenerated || !bytes.Equal(cfg.SessionKey, bytes.Repeat([]byte{0xab}, 32)) || cfg.MaxAge != 90*time.Minute {
		t.Errorf("from the environment: %+v", cfg)
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

	for name, tc := range map[string]struct{ env map[string]string }{
		"key not hex":        {map[string]string{"SESSION_KEY": "zz" + key}},
		"key too short":      {map[string]string{"SESSION_KEY": strings.Repeat("ab", 31)}},
		"max age not a time": {map[string]string{"SESSION_MAX_AGE": "1 day"}},
		"max age too short":  {map[string]string{"SESSION_MAX_AGE": "500ms"}},
		"max age fractional": {map[string]string{"SESSION_MAX_AGE": "1.5s"}},
		"max age negative":   {map[string]string{"SESSION_MAX_AGE": "-1h"}},
		"user no password":   {map[string]string{"DEMO_USERS": "alice"}},
		"user empty pass":    {map[string]string{"DEMO_USERS": "alice:"}},
		"user bad name":      {map[string]string{"DEMO_USERS": "a b:c"}},
		"user twice":         {map[string]string{"DEMO_USERS": "alice:x,alice:y"}},
		"password too long":  {map[string]string{"DEMO_USERS": "alice:" + strings.Repeat("x", 73)}},
	} {
		if cfg, err := loadConfig(env(tc.env)); err == nil {
			t.Errorf("%s: no error, config %+v", name, cfg)
		} else {
			t.Logf("%s: %v", name, err)
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
