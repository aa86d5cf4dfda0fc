package ginstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/gin-contrib/sessions"
	"github.com/gin-gonic/gin"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/ginstore"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A gin app that counts a visitor's visits in a session kept in MongoDB.
// README.md shows the lines between the markers (TestReadmeExample checks
// that they match).
func Example() {
	ctx := context.Background()
	// gin example begins
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	coll := client.Database("myapp").Collection("gin_sessions")
	hashKey := []byte("32+ random bytes, from a secret!") // the same on every instance
	store, err := mongostore.NewStore(ctx, coll, mongostore.Config{}, hashKey)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	r := gin.New()
	r.Use(sessions.Sessions("mysession", ginstore.New(store)))
	r.GET("/", func(c *gin.Context) {
		session := sessions.Default(c)
		visits, _ := session.Get("visits").(int)
		session.Set("visits", visits+1)
		if err := session.Save(); err != nil {
			c.String(http.StatusInternalServerError, "cannot save session")
			return
		}
		c.String(http.StatusOK, "visit number %d\n", visits+1)
	})
	// gin example ends
	defer client.Disconnect(ctx)
	defer coll.Drop(ctx)

	srv := httptest.NewServer(r)
	defer srv.Close()
	browser := newBrowser()
	get(browser, srv.URL)
	get(browser, srv.URL)
	get(newBrowser(), srv.URL) // another visitor
	// Output:
	// visit number 1
	// visit number 2
	// visit number 1
}

// newBrowser returns an HTTP client that keeps cookies, like a browser.
func newBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// get fetches url with client and prints the response body.
func get(client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(strings.TrimSpace(string(body)))
}
