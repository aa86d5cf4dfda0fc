package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mongostore/mongostore/embeddb"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEmbeddedAddr checks how the embedded server's address is chosen:
// EMBEDDED_DB_ADDR when set (which must be free); otherwise the address
// saved in the data directory, else the default, and a free port when
// that one is taken, said in the log; the address is saved for the next
// start unless it came from the setting.
func TestEmbeddedAddr(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	taken, free, free2 := held.Addr().String(), freeAddr(t), freeAddr(t)
	const other = "another free port"
	for _, tc := range []struct {
		name             string
		setting, saved   string // EMBEDDED_DB_ADDR, the saved file's content
		def              string // the default address
		want             string // the address; other: a free port, not taken
		wantLog, wantErr string
		wantFile         bool // the address is saved
	}{
		{name: "first start, default free", def: free, want: free, wantFile: true},
		{name: "first start, default taken", def: taken, want: other, wantLog: taken + " is in use: the embedded database listens on ", wantFile: true},
		{name: "saved address", saved: free2 + "\n", def: free, want: free2, wantFile: true},
		{name: "saved address taken", saved: taken, def: free, want: other, wantLog: taken + " is in use", wantFile: true},
		{name: "saved file unreadable", saved: "not an address", def: free, want: free, wantLog: "saved address is unreadable", wantFile: true},
		{name: "setting", setting: free, def: taken, want: free},
		{name: "setting, port 0", setting: "127.0.0.1:0", def: taken, want: "127.0.0.1:0"},
		{name: "setting taken", setting: taken, def: free,
			wantErr: "embedded database: listen on " + taken + ": address already in use: set EMBEDDED_DB_ADDR to another address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, embeddedAddrFileName)
			if tc.saved != "" {
				if err := os.WriteFile(file, []byte(tc.saved), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			got, save, err := embeddedAddr(config{DataDir: dir, EmbeddedAddr: tc.setting}, tc.def, slog.New(slog.NewTextHandler(&logs, nil)))
			if err == nil {
				err = save()
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == other && (got == taken || !strings.HasPrefix(got, "127.0.0.1:") || strings.HasSuffix(got, ":0")):
				t.Errorf("address %s, want another free loopback port than %s", got, taken)
			case tc.want != other && got != tc.want:
				t.Errorf("address %s, want %s", got, tc.want)
			}
			if !strings.Contains(logs.String(), tc.wantLog) || tc.wantLog == "" && logs.Len() > 0 {
				t.Errorf("log %q, want %q", logs.String(), tc.wantLog)
			}
			data, err := os.ReadFile(file)
			switch {
			case tc.wantFile && string(data) != got+"\n":
				t.Errorf("saved %q (%v), want %q", data, err, got+"\n")
			case !tc.wantFile && string(data) != tc.saved:
				t.Errorf("saved file %q, want %q (unchanged)", data, tc.saved)
			}
		})
	}
}

// TestSecondAppOnTheDataDirectory: a second sample app on the data
// directory of a running one (its embedded database) fails to start, and
// leaves the address the first saved, which stays the one to use.
func TestSecondAppOnTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	first, _, err := startEmbedded(context.Background(), config{DataDir: dir}, logger, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	file := filepath.Join(dir, embeddedAddrFileName)
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if second, _, err := startEmbedded(context.Background(), config{DataDir: dir}, logger, io.Discard); !errors.Is(err, embeddb.ErrDirInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second embedded database on the directory: %v, want embeddb.ErrDirInUse", err)
	}
	if again, err := os.ReadFile(file); err != nil || !bytes.Equal(again, saved) {
		t.Fatalf("the saved address went from %q to %q (%v)", saved, again, err)
	}
}

// TestBadURIKeepsItsPasswordOut: a MONGODB_URI the driver cannot parse is
// refused with the driver's reason, but none of the password, which that
// reason may quote.
func TestBadURIKeepsItsPasswordOut(t *testing.T) {
	ctx := context.Background()
	for _, uri := range []string{"mongodb://alice:hunter2%zz@127.0.0.1:1/", "mongodb://alice:hunter2@127.0.0.1:port/"} {
		db, err := openDatabase(ctx, ctx, config{MongoURI: uri}, slog.New(slog.DiscardHandler), io.Discard)
		if err == nil {
			db.close(ctx)
			t.Fatalf("%s: no error", uri)
		}
		if msg := err.Error(); !strings.Contains(msg, "MONGODB_URI: not a valid connection string") || strings.Contains(msg, "hunter") {
			t.Errorf("the error: %s", msg)
		}
	}
}
