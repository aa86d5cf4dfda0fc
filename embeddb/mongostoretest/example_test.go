package mongostoretest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/embeddb/mongostoretest"
)

// A test of a handler that counts visits, with the store on an embedded
// server: the second request brings the first one's cookie back. In a
// test, pass its *testing.T instead of example{}.
func ExampleNewStore() {
	t := &example{}
	defer t.cleanUp()
	store := mongostoretest.NewStore(t, mongostore.Config{})
	handler := store.Middleware("session", nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session, _ := store.Get(r, "session")
		n, _ := session.Values["visits"].(int)
		session.Values["visits"] = n + 1
		fmt.Fprintf(w, "visit %d", n+1)
	}))

	first := httptest.NewRecorder()
	handler.ServeHTTP(first, httptest.NewRequest(http.MethodGet, "/", nil))
	second := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, c := range first.Result().Cookies() {
		r.AddCookie(c)
	}
	handler.ServeHTTP(second, r)
	fmt.Println(first.Body, "then", second.Body)
	// Output: visit 1 then visit 2
}

// example stands in for the *testing.T of a test.
type example struct{ cleanups []func() }

func (e *example) Helper()                      {}
func (e *example) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (e *example) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (e *example) cleanUp() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
