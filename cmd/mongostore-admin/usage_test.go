package main

import (
	"bytes"
	"context"
	"net"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestUsage checks help, usage errors and configuration errors: exit 0
// for help (on standard output), 2 for a mistake (on standard error),
// before anything connects.
func TestUsage(t *testing.T) {
	noURI := map[string]string{"MONGODB_URI": ""}
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"no command", nil, nil, 2, nil, []string{"Usage: mongostore-admin <command>", "stats", "sessions", "end", "check"}},
		{"-h", nil, []string{"-h"}, 0, []string{"Usage: mongostore-admin <command>", "MONGODB_URI", "SESSION_KEY", "Exit codes"}, nil},
		{"help", nil, []string{"help"}, 0, []string{"Usage: mongostore-admin <command>"}, nil},
		{"help stats", nil, []string{"help", "stats"}, 0, []string{"Usage: mongostore-admin stats", "-sample"}, nil},
		{"unknown command", nil, []string{"bogus"}, 2, nil, []string{`unknown command "bogus"`, "Usage:"}},
		{"stats -h", noURI, []string{"stats", "-h"}, 0, []string{"Usage: mongostore-admin stats", "-sample", "-exact", "-json", "-db", "-collection", "-timeout", "MONGODB_URI"}, nil},
		{"sessions -h", noURI, []string{"sessions", "-h"}, 0, []string{"Usage: mongostore-admin sessions", "-owner", "SESSION_KEY"}, nil},
		{"end -h", noURI, []string{"end", "-h"}, 0, []string{"Usage: mongostore-admin end", "-owner", "-handle", "Ended means ended"}, nil},
		{"check --help", noURI, []string{"check", "--help"}, 0, []string{"Usage: mongostore-admin check", "scratch\ncollection, which it drops"}, nil},
		{"bad flag", nil, []string{"stats", "-bogus"}, 2, nil, []string{"flag provided but not defined: -bogus", "Usage: mongostore-admin stats"}},
		{"bad flag value", nil, []string{"stats", "-sample", "many"}, 2, nil, []string{`invalid value "many" for flag -sample`}},
		{"negative sample", nil, []string{"stats", "-sample", "-1"}, 2, nil, []string{"-sample -1: must be 0 or more"}},
		{"extra argument", nil, []string{"check", "now"}, 2, nil, []string{`unexpected argument "now"`}},
		{"zero timeout", nil, []string{"check", "-timeout", "0s"}, 2, nil, []string{"-timeout 0s: must be positive"}},
		{"no owner", withKey, []string{"sessions"}, 2, nil, []string{"-owner is required"}},
		{"end without owner", withKey, []string{"end", "-handle", "x"}, 2, nil, []string{"-owner is required"}},
		{"no MONGODB_URI", noURI, []string{"stats"}, 2, nil, []string{"MONGODB_URI is not set"}},
		{"bad MONGODB_URI", map[string]string{"MONGODB_URI": "http://localhost/"}, []string{"check"}, 2, nil, []string{"MONGODB_URI:"}},
		{"sessions without SESSION_KEY", nil, []string{"sessions", "-owner", "alice"}, 2, nil, []string{"SESSION_KEY is not set", "session.key"}},
		{"end without SESSION_KEY", nil, []string{"end", "-owner", "alice"}, 2, nil, []string{"SESSION_KEY is not set"}},
		{"SESSION_KEY not hex", map[string]string{"SESSION_KEY": "not-hex"}, []string{"sessions", "-owner", "alice"}, 2, nil, []string{"SESSION_KEY: not hexadecimal"}},
		{"SESSION_KEY's character not quoted", map[string]string{"SESSION_KEY": strings.Repeat("ab", 31) + "zq"}, []string{"sessions", "-owner", "alice"}, 2,
			nil, []string{"SESSION_KEY: not hexadecimal"}},
		{"SESSION_KEY short", map[string]string{"SESSION_KEY": strings.Repeat("ab", 16)}, []string{"end", "-owner", "alice"}, 2, nil, []string{"SESSION_KEY: 16 bytes, want at least 32 (64 hex digits)"}},
		{"SESSION_BLOCK_KEY bad size", map[string]string{"SESSION_KEY": testKey, "SESSION_BLOCK_KEY": strings.Repeat("ab", 10)}, []string{"sessions", "-owner", "alice"}, 2, nil, []string{"SESSION_BLOCK_KEY: 10 bytes, want 16, 24 or 32"}},
		{"second SESSION_KEY short", map[string]string{"SESSION_KEY": testKey + ",abcd"}, []string{"sessions", "-owner", "alice"}, 2, nil, []string{"SESSION_KEY (key 2): 2 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCmd(t, tt.env, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit code %d, want %d", r.code, tt.code)
			}
			mustContain(t, "stdout", r.stdout, tt.stdout...)
			mustContain(t, "stderr", r.stderr, tt.stderr...)
			if strings.Contains(r.stderr, "invalid byte") || strings.Contains(r.stderr, "'z'") {
				t.Errorf("the output quotes part of SESSION_KEY: %s", r.stderr)
			}
			if tt.code == 0 && r.stderr != "" {
				t.Errorf("help wrote to stderr: %s", r.stderr)
			}
			if tt.code != 0 && r.stdout != "" {
				t.Errorf("a usage error wrote to stdout: %s", r.stdout)
			}
		})
	}
}

// TestUnreachable checks that a server that does not answer is a failure
// (exit 1) within seconds, with an error that names the server but not
// the password.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	env := map[string]string{"MONGODB_URI": "mongodb://admin:s3cr%40t@" + addr + "/", "SESSION_KEY": testKey}
	for _, args := range [][]string{{"stats"}, {"sessions", "-owner", "alice"}, {"end", "-owner", "alice"}, {"check"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			r := runCmd(t, env, args...)
			if r.code != 1 {
				t.Errorf("exit code %d, want 1", r.code)
			}
			if r.took > 10*time.Second {
				t.Errorf("gave up after %v, want within seconds", r.took)
			}
			mustContain(t, "stderr", r.stderr, "cannot reach "+addr+" (the server in MONGODB_URI): the connection was refused; check")
			if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || strings.Contains(r.stderr, "opology") {
				t.Errorf("stderr has %d lines, or the driver's topology: %s", lines, r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, "s3cr") {
				t.Error("the output shows the password")
			}
		})
	}
}

// TestRun runs the command through run, with the process's environment.
func TestRun(t *testing.T) {
	name, coll := testCollection(t)
	createIndexes(t, coll)
	t.Setenv("DB_NAME", testDatabase)
	t.Setenv("SESSION_COLLECTION", name)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"stats", "-sample", "0"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	mustContain(t, "stdout", stdout.String(), testDatabase+"."+name, "expired     0 not deleted yet")
}

// TestStep checks the progress shown for a step that takes a while, and
// that a quick one shows none.
func TestStep(t *testing.T) {
	var out bytes.Buffer
	done := step(&out, 20*time.Millisecond, "stats", "counting")
	time.Sleep(70 * time.Millisecond)
	done()
	mustMatch(t, "progress", out.String(), `(?m)^mongostore-admin stats: counting… \d+s$`, `(?m)^mongostore-admin stats: counting: done in \d`)
	out.Reset()
	step(&out, time.Minute, "stats", "counting")()
	if out.Len() != 0 {
		t.Errorf("a quick step showed progress: %s", out.String())
	}
}

// TestVersion checks -version: the module's version, on standard output,
// before anything is configured.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"-version", "--version"} {
		r := runCmd(t, map[string]string{"MONGODB_URI": ""}, arg)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s: exit code %d, stderr %q; want 0, nothing", arg, r.code, r.stderr)
		}
		mustMatch(t, "stdout", r.stdout, `^mongostore-admin (\(devel\)|v\d+\.\d+\.\d+\S*)\n$`)
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "(devel)"},
		{&debug.BuildInfo{}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
	} {
		if got := moduleVersion(tc.info); got != tc.want {
			t.Errorf("moduleVersion(%+v) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

// TestTimeoutWhileConnecting: a -timeout that runs out before the server
// answers says so, not that the driver looked for 5 s.
func TestTimeoutWhileConnecting(t *testing.T) {
	r := runCmd(t, nil, "stats", "-timeout", "1ms")
	if r.code != 1 || !strings.Contains(r.stderr, "no server answered within 1ms") || !strings.Contains(r.stderr, "(the -timeout of 1ms ran out)") {
		t.Fatalf("stats -timeout 1ms: exit %d, stderr %q; want 1, and the -timeout named", r.code, r.stderr)
	}
}
