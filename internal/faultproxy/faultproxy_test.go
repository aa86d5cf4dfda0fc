package faultproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers each line it reads with the line, prefixed with its
// name, until the test ends.
func echoServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+":"+line); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends line and returns the answer, or the error, within
// timeout.
func roundTrip(c net.Conn, line string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(answer, "\n"), err
}

func TestForwardAndSwitchUpstream(t *testing.T) {
	p := newProxy(t, echoServer(t, "a"))
	c := dial(t, p)
	if got, err := roundTrip(c, "hi", time.Second); err != nil || got != "a:hi" {
		t.Fatalf("round trip = %q, %v; want a:hi", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}
	p.SetUpstream(echoServer(t, "b"))
	if got, _ := roundTrip(c, "old", time.Second); got != "a:old" {
		t.Fatalf("an open connection moved: %q", got)
	}
	if got, _ := roundTrip(dial(t, p), "new", time.Second); got != "b:new" {
		t.Fatalf("a new connection went to %q, want b", got)
	}
}

func TestCutAndRefuse(t *testing.T) {
	p := newProxy(t, echoServer(t, "a"))
	c := dial(t, p)
	if _, err := roundTrip(c, "hi", time.Second); err != nil {
		t.Fatal(err)
	}
	p.Refuse(true)
	p.Cut()
	if _, err := roundTrip(c, "after cut", time.Second); err == nil {
		t.Fatal("a cut connection still answers")
	}
	// Refused: the reset may reach the client before its connect returns,
	// or after, at its first read.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		_, err = roundTrip(c, "refused", time.Second)
		c.Close()
		if err == nil {
			t.Fatal("a new connection is answered while refused")
		}
	}
	deadline := time.Now().Add(time.Second)
	for p.Conns() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns = %d after the cut, want 0", n)
	}
	p.Refuse(false)
	if got, err := roundTrip(dial(t, p), "back", time.Second); err != nil || got != "a:back" {
		t.Fatalf("after Refuse(false): %q, %v", got, err)
	}
}

func TestLatency(t *testing.T) {
	p := newProxy(t, echoServer(t, "a"))
	c := dial(t, p)
	p.SetLatency(200 * time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(c, "slow", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip took %v with 200ms of latency", d)
	}
	// Lowering the latency releases what is held.
	p.SetLatency(time.Hour)
	go func() { time.Sleep(100 * time.Millisecond); p.SetLatency(0) }()
	if got, err := roundTrip(c, "released", 2*time.Second); err != nil || got != "a:released" {
		t.Fatalf("after the latency was lowered: %q, %v", got, err)
	}
}

func TestBlackHole(t *testing.T) {
	p := newProxy(t, echoServer(t, "a"))
	open := dial(t, p)
	if _, err := roundTrip(open, "hi", time.Second); err != nil {
		t.Fatal(err)
	}
	p.BlackHole(true)
	if _, err := roundTrip(open, "held", 200*time.Millisecond); err == nil {
		t.Fatal("an open connection answered in the black hole")
	}
	fresh := dial(t, p) // accepted, but never answered
	if _, err := roundTrip(fresh, "fresh", 200*time.Millisecond); err == nil {
		t.Fatal("a new connection answered in the black hole")
	}
	p.BlackHole(false)
	fresh.SetDeadline(time.Now().Add(time.Second))
	answer, err := bufio.NewReader(fresh).ReadString('\n')
	if err != nil || answer != "a:fresh\n" {
		t.Fatalf("held bytes after the black hole: %q, %v; want them delivered", answer, err)
	}
}

func TestCloseWithHeldConnections(t *testing.T) {
	p, err := New(echoServer(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	p.BlackHole(true)
	io.WriteString(c, "held\n")
	p.SetLatency(time.Hour)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hung on held connections")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("the proxy still accepts connections after Close")
	}
}

func TestMongoURI(t *testing.T) {
	p := newProxy(t, "127.0.0.1:1")
	for _, tc := range []struct{ in, want string }{
		{"mongodb://127.0.0.1:27017", "mongodb://" + p.Addr() + "/?directConnection=true"},
		{"mongodb://u:pw@db.example:27017/app?replicaSet=rs0&w=majority", "mongodb://u:pw@" + p.Addr() + "/app?directConnection=true&w=majority"},
	} {
		if got, err := p.MongoURI(tc.in); err != nil || got != tc.want {
			t.Errorf("MongoURI(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"mongodb://a:1,b:2/", "mongodb+srv://cluster.example/", "::"} {
		if _, err := p.MongoURI(bad); err == nil {
			t.Errorf("MongoURI(%q) gave no error", bad)
		}
	}
	if h, err := Host("mongodb://127.0.0.1:27499/"); err != nil || h != "127.0.0.1:27499" {
		t.Errorf("Host = %q, %v", h, err)
	}
}
