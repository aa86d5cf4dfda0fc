package mongostoretest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/embeddb/mongostoretest"
)

// TestNewStore: a store from the helper saves and loads sessions, and its
// server answers the client the helper returns.
func TestNewStore(t *testing.T) {
	store := mongostoretest.NewStore(t, mongostore.Config{})
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	s, _ := store.Get(r, "session")
	s.Values["user"] = "ada"
	if err := s.Save(r, rec); err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(rec.Result().Cookies()[0])
	if s, err := store.Get(r, "session"); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("load: %v, %v", s.Values, err)
	}
	if err := mongostoretest.Client(t).Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestSubtestNames checks that the helper serves subtests whatever their
// names: a repeated one (Go adds "#01") or one with a % in it.
func TestSubtestNames(t *testing.T) {
	for _, name := range []string{"login", "login", "100% full"} {
		t.Run(name, func(t *testing.T) {
			if err := mongostoretest.Client(t).Ping(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
