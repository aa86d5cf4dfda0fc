// Package faultproxy is an in-process TCP proxy that injects network
// faults between a MongoDB client and its server, for the reliability tests
// of mongostore's modules: it can cut every connection, refuse new ones,
// delay every answer, or black-hole the traffic (connections accepted,
// nothing answered), and it points at a new server address after a
// restart. It can also make a standalone server pass for a mongos, the
// one kind of server to which a driver sends a read preference of every
// mode (see ClaimMongos). It listens on loopback only and needs nothing
// outside the standard library.
package faultproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its loopback address to an upstream
// address, with faults switched on and off by its methods. It is safe for
// concurrent use.
type Proxy struct {
	ln net.Listener

	mu       sync.Mutex
	upstream string
	refuse   bool
	latency  time.Duration
	mongos   bool
	// hole is closed when the black hole ends; nil when there is none.
	hole   chan struct{}
	conns  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

// link is one client connection and, once dialled, its upstream.
type link struct {
	client net.Conn
	mongos bool // ClaimMongos was on when the proxy accepted it
	mu     sync.Mutex
	server net.Conn
}

func (l *link) close() {
	l.client.Close()
	l.mu.Lock()
	if l.server != nil {
		l.server.Close()
	}
	l.mu.Unlock()
}

// New starts a proxy on a free loopback port that forwards to upstream
// (host:port).
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Host returns the host:port of a mongodb:// connection string with one
// host, for New or SetUpstream.
func Host(mongoURI string) (string, error) {
	u, err := url.Parse(mongoURI)
	if err != nil || u.Scheme != "mongodb" || u.Host == "" || strings.Contains(u.Host, ",") {
		return "", fmt.Errorf("faultproxy: %q is not a mongodb://host:port/ connection string with one host", mongoURI)
	}
	return u.Host, nil
}

// MongoURI returns mongoURI with its host replaced by the proxy's address,
// connecting directly: replica set discovery would find the members'
// own addresses and go around the proxy.
func (p *Proxy) MongoURI(mongoURI string) (string, error) {
	if _, err := Host(mongoURI); err != nil {
		return "", err
	}
	u, _ := url.Parse(mongoURI)
	u.Host = p.Addr()
	q := u.Query()
	q.Del("replicaSet")
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), nil
}

// SetUpstream makes new connections go to upstream (host:port), for
// example after the server restarted on another port. Existing connections
// keep their server.
func (p *Proxy) SetUpstream(upstream string) {
	p.mu.Lock()
	p.upstream = upstream
	p.mu.Unlock()
}

// Cut closes every open connection, both ways, as a network failure or a
// server crash would.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Refuse makes the proxy refuse (reset) new connections while on is true.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// SetLatency delays every chunk the server sends by d, so each round trip
// takes d longer; 0 removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// BlackHole, while on is true, stops all traffic: new connections are
// accepted but not answered, and bytes on open connections are held, not
// delivered, as when packets are dropped. Turned off, held traffic flows
// again (TCP would retransmit it), unless the client gave up meanwhile.
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hole == nil:
		p.hole = make(chan struct{})
	case !on && p.hole != nil:
		close(p.hole)
		p.hole = nil
	}
}

// ClaimMongos, while on is true, makes the connections accepted from then
// on claim that their server is a mongos (a router of a sharded cluster): the
// proxy reads the server's answers as MongoDB wire-protocol messages and
// rewrites each answer to a handshake (hello, isMaster) so that its
// document says msg "isdbgrid" and has no replica set fields, which is how
// a driver tells a mongos. A driver sends a standalone server no read
// preference, but sends a mongos every mode but primary in $readPreference,
// so a test can see the read preference of each command. The driver then
// treats the server as a mongos in other ways too: it sends retryable
// writes with a txnNumber, for one. Other answers pass unchanged,
// compressed ones too (a handshake is never compressed). Connections
// already open keep their mode.
func (p *Proxy) ClaimMongos(on bool) {
	p.mu.Lock()
	p.mongos = on
	p.mu.Unlock()
}

// Conns returns the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// wait blocks while the black hole is on, and returns false if the proxy
// closed meanwhile.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		hole, closed := p.hole, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if hole == nil {
			return true
		}
		<-hole
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.refuse || p.closed {
			p.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, as a refused connection gets
			}
			c.Close()
			continue
		}
		l := &link{client: c, mongos: p.mongos}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the upstream for l, once any black hole is over, and copies
// bytes both ways until either side closes.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
		l.close()
	}()
	if !p.wait() {
		return
	}
	p.mu.Lock()
	upstream, closed := p.upstream, p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	server, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		return // the client sees its connection closed, as a refused one
	}
	l.mu.Lock()
	l.server = server
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, l.client, false); done <- struct{}{} }()
	go func() {
		if l.mongos {
			p.pipeMessages(l.client, server)
		} else {
			p.pipe(l.client, server, true)
		}
		done <- struct{}{}
	}()
	<-done
	l.close()
	<-done
}

// delay waits until the latency has passed since a chunk arrived at
// arrived. The latency in force is read again as it waits, so lowering it
// releases the chunks held, as a network path that recovers would.
func (p *Proxy) delay(arrived time.Time) {
	for {
		p.mu.Lock()
		d, closed := p.latency, p.closed
		p.mu.Unlock()
		left := time.Until(arrived.Add(d))
		if left <= 0 || closed {
			return
		}
		time.Sleep(min(left, 10*time.Millisecond))
	}
}

// pipe copies src to dst, holding bytes while the black hole is on and, for
// the server's answers (delayed), waiting out the latency first.
func (p *Proxy) pipe(dst, src net.Conn, delayed bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if delayed {
				p.delay(time.Now())
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or either side closed
		}
	}
}

// pipeMessages copies the server's answers from src to dst one
// wire-protocol message at a time, as pipe does for delayed chunks, with
// handshake answers rewritten to claim a mongos.
func (p *Proxy) pipeMessages(dst, src net.Conn) {
	r := bufio.NewReaderSize(src, 32<<10)
	for {
		msg, err := readMessage(r)
		if err != nil {
			return // EOF, either side closed, or not the wire protocol
		}
		if !p.wait() {
			return
		}
		p.delay(time.Now())
		if _, err := dst.Write(claimMongos(msg)); err != nil {
			return
		}
	}
}
