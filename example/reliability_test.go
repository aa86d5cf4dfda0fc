package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/faultproxy"
	"golang.org/x/crypto/bcrypt"
)

// The library's reliability suite (reliability_test.go at the root) checks
// the store under every fault; this one checks what a user of the sample
// app sees during a database outage: clean error pages, /healthz 503, and
// everything back within two seconds.

// outageUser logs in, reads the home page and logs out, in a loop, with a
// cookie jar of its own.
type outageUser struct {
	name   string
	base   string
	client *http.Client
}

// do sends a request and returns its status and body; status 0 means the
// request itself failed (a panic in the app would show as that).
func (u *outageUser) do(method, path string, form url.Values) (int, string) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestOutageUnderLoad(t *testing.T) {
	host, err := faultproxy.Host(testURI)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxied, err := proxy.MongoURI(testURI)
	if err != nil {
		t.Fatal(err)
	}
	const users = 8
	app := startApp(t, func(c *config) {
		c.MongoURI = proxied
		for i := range users {
			c.Users = append(c.Users, credential{Name: fmt.Sprintf("user%d", i), Password: "pw"})
		}
		c.BcryptCost = bcrypt.MinCost
	})

	var (
		mu       sync.Mutex
		statuses = map[string]int{} // "METHOD path status" -> count
		problems []string
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		jar, _ := cookiejar.New(nil)
		u := &outageUser{name: fmt.Sprintf("user%d", i), base: app.url, client: &http.Client{
			Jar: jar, Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, step := range []struct {
					method, path string
					form         url.Values
				}{
					{http.MethodPost, "/login", url.Values{"username": {u.name}, "password": {"pw"}}},
					{http.MethodGet, "/", nil},
					{http.MethodGet, "/", nil},
					{http.MethodPost, "/logout", url.Values{}},
				} {
					start := time.Now()
					status, body := u.do(step.method, step.path, step.form)
					if d := time.Since(start); d > dbTimeout*2+2*time.Second {
						problem("%s %s took %v", step.method, step.path, d)
					}
					mu.Lock()
					statuses[fmt.Sprintf("%s %s %d", step.method, step.path, status)]++
					mu.Unlock()
					switch {
					case status == 0:
						problem("%s %s: %s", step.method, step.path, body)
					case status == http.StatusOK && step.path == "/" && !strings.Contains(body, `<strong id="current-user">`+u.name+`</strong>`):
						problem("%s sees a home page that is not its own", u.name)
					case status >= 500 && status != http.StatusInternalServerError && status != http.StatusServiceUnavailable:
						problem("%s %s: %d", step.method, step.path, status)
					}
				}
			}
		})
	}
	health := &outageUser{base: app.url, client: &http.Client{Timeout: 30 * time.Second}}
	wantHealth := func(status int, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got, _ := health.do(http.MethodGet, "/healthz", nil)
			if got == status {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("GET /healthz: %d for %v, want %d", got, within, status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	time.Sleep(time.Second)
	wantHealth(http.StatusOK, 0)
	proxy.Refuse(true)
	proxy.Cut()
	down := wantHealth(http.StatusServiceUnavailable, pingTimeout+time.Second)
	time.Sleep(3 * time.Second)
	wantHealth(http.StatusServiceUnavailable, 0)
	proxy.Refuse(false)
	up := wantHealth(http.StatusOK, 2*time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	t.Logf("/healthz: 503 %v after the cut, 200 %v after the database came back", down.Round(time.Millisecond), up.Round(time.Millisecond))
	t.Logf("answers during the run: %v", statuses)
	for _, p := range problems {
		t.Error(p)
	}
	var failed, ok int
	for k, n := range statuses {
		switch {
		case strings.HasSuffix(k, " 500") || strings.HasSuffix(k, " 503"):
			failed += n
		default:
			ok += n
		}
	}
	if failed == 0 || ok == 0 {
		t.Errorf("%d requests failed and %d succeeded: want both, the outage was injected", failed, ok)
	}
}
