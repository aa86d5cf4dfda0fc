package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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

// wireServer sends every connection the bytes of msgs, a few at a time (the
// proxy must put each message together), and then keeps it open until the
// test ends.
func wireServer(t *testing.T, msgs ...[]byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	all := bytes.Join(msgs, nil)
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				for b := all; len(b) > 0; b = b[min(7, len(b)):] {
					if _, err := c.Write(b[:min(7, len(b))]); err != nil {
						return
					}
				}
				<-done
			})
		}
	})
	return ln.Addr().String()
}

// OP_MSG flagBits.
const (
	checksumPresent = 1 << 0
	moreToCome      = 1 << 1
)

// section is an OP_MSG section: kind 0 with one document, or kind 1 with
// an identifier and documents.
type section struct {
	kind byte
	id   string
	docs []any
}

// wireMsg returns an OP_MSG with flags and sections, and a CRC-32C
// checksum if the flags say so.
func wireMsg(t *testing.T, flags uint32, sections ...section) []byte {
	t.Helper()
	m := binary.LittleEndian.AppendUint32(header(7, 42, 2013), flags)
	for _, s := range sections {
		m = append(m, s.kind)
		var docs []byte
		for _, d := range s.docs {
			docs = append(docs, marshal(t, d)...)
		}
		if s.kind == 1 {
			m = binary.LittleEndian.AppendUint32(m, uint32(4+len(s.id)+1+len(docs)))
			m = append(append(m, s.id...), 0)
		}
		m = append(m, docs...)
	}
	if flags&checksumPresent != 0 {
		m = binary.LittleEndian.AppendUint32(m, 0)
		binary.LittleEndian.PutUint32(m, uint32(len(m)))
		binary.LittleEndian.PutUint32(m[len(m)-4:], crc32.Checksum(m[:len(m)-4], crc32.MakeTable(crc32.Castagnoli)))
	}
	binary.LittleEndian.PutUint32(m, uint32(len(m)))
	return m
}

// body is an OP_MSG's body section.
func body(doc any) section { return section{kind: 0, docs: []any{doc}} }

// wireReply returns a legacy OP_REPLY holding doc.
func wireReply(t *testing.T, doc any) []byte {
	t.Helper()
	m := binary.LittleEndian.AppendUint32(header(8, 43, 1), 0) // responseFlags
	m = binary.LittleEndian.AppendUint64(m, 0)                 // cursorID
	m = binary.LittleEndian.AppendUint32(m, 0)                 // startingFrom
	m = binary.LittleEndian.AppendUint32(m, 1)                 // numberReturned
	m = append(m, marshal(t, doc)...)
	binary.LittleEndian.PutUint32(m, uint32(len(m)))
	return m
}

// header returns a message header without its length.
func header(requestID, responseTo, opCode uint32) []byte {
	h := make([]byte, 4, 16)
	h = binary.LittleEndian.AppendUint32(h, requestID)
	h = binary.LittleEndian.AppendUint32(h, responseTo)
	return binary.LittleEndian.AppendUint32(h, opCode)
}

func marshal(t *testing.T, doc any) []byte {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keys returns the top-level keys of doc.
func keys(t *testing.T, doc bson.Raw) []string {
	t.Helper()
	elems, err := doc.Elements()
	if err != nil {
		t.Fatalf("invalid document: %v", err)
	}
	var out []string
	for _, e := range elems {
		out = append(out, e.Key())
	}
	return out
}

func TestProxyClaimMongos(t *testing.T) {
	hello := bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "msg", Value: "other"},
		{Key: "topologyVersion", Value: bson.D{{Key: "processId", Value: bson.NewObjectID()}, {Key: "counter", Value: int64(0)}}},
		{Key: "setName", Value: "rs0"}, {Key: "re", Value: bson.Regex{Pattern: "a", Options: "i"}},
		{Key: "maxWireVersion", Value: int32(21)}, {Key: "ok", Value: 1.0}}
	helloKeys := []string{"isWritablePrimary", "topologyVersion", "re", "maxWireVersion", "ok", "msg"}
	legacy := bson.D{{Key: "ismaster", Value: true}, {Key: "isreplicaset", Value: true}, {Key: "ok", Value: 1.0}}
	legacyKeys := []string{"ismaster", "ok", "msg"}
	compressed := append(header(9, 44, 2012), "not looked at"...)
	binary.LittleEndian.PutUint32(compressed, uint32(len(compressed)))
	msgs := []struct {
		name string
		msg  []byte
		want []string // the keys of the rewritten document; nil: the message passes unchanged
	}{
		{"OP_MSG hello", wireMsg(t, 0, body(hello)), helloKeys},
		{"OP_MSG hello with a checksum, streamed", wireMsg(t, checksumPresent|moreToCome, body(hello)), helloKeys},
		{"OP_MSG hello after a document sequence", wireMsg(t, 0, section{kind: 1, id: "documents", docs: []any{bson.D{{Key: "ismaster", Value: true}}}}, body(hello)), helloKeys},
		{"OP_REPLY hello", wireReply(t, legacy), legacyKeys},
		{"another answer", wireMsg(t, checksumPresent, body(bson.D{{Key: "n", Value: int32(1)}, {Key: "ok", Value: 1.0}})), nil},
		{"a failed hello", wireMsg(t, 0, body(bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "no"}, {Key: "code", Value: int32(18)}})), nil},
		{"ismaster below the top level", wireMsg(t, 0, body(bson.D{{Key: "cursor", Value: bson.D{{Key: "ismaster", Value: true}}}, {Key: "ok", Value: 1.0}})), nil},
		{"another OP_REPLY", wireReply(t, bson.D{{Key: "ok", Value: 1.0}}), nil},
		{"OP_COMPRESSED", compressed, nil},
	}
	var all [][]byte
	for _, m := range msgs {
		all = append(all, m.msg)
	}
	p := newProxy(t, wireServer(t, all...))
	before := dial(t, p)
	want := bytes.Join(all, nil)
	first := make([]byte, len(all[0])) // read: the proxy has accepted it
	before.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(before, first); err != nil || !bytes.Equal(first, all[0]) {
		t.Fatalf("first message before ClaimMongos: %v; changed: %t", err, !bytes.Equal(first, all[0]))
	}
	p.ClaimMongos(true)
	c := dial(t, p)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for _, m := range msgs {
		got, err := readMessage(r)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if m.want == nil {
			if !bytes.Equal(got, m.msg) {
				t.Errorf("%s: changed to % x", m.name, got)
			}
			continue
		}
		if n := binary.LittleEndian.Uint32(got); int(n) != len(got) {
			t.Errorf("%s: messageLength %d of a %d-byte message", m.name, n, len(got))
		}
		// All but the length and the document stays, the checksum aside.
		gotStart, gotEnd, gotSum := bodyAt(t, got)
		start, end, sum := bodyAt(t, m.msg)
		if !bytes.Equal(got[4:gotStart], m.msg[4:start]) || !bytes.Equal(got[gotEnd:len(got)-len(gotSum)], m.msg[end:len(m.msg)-len(sum)]) {
			t.Errorf("%s: more than the document changed:\n% x\nwas\n% x", m.name, got, m.msg)
		}
		if len(gotSum) != len(sum) {
			t.Errorf("%s: checksum % x, was % x", m.name, gotSum, sum)
		} else if want := crc32.Checksum(got[:len(got)-4], crc32.MakeTable(crc32.Castagnoli)); sum != nil && binary.LittleEndian.Uint32(gotSum) != want {
			t.Errorf("%s: checksum % x, want %08x", m.name, gotSum, want)
		}
		doc, was := bson.Raw(got[gotStart:gotEnd]), bson.Raw(m.msg[start:end])
		if k := keys(t, doc); !slices.Equal(k, m.want) {
			t.Errorf("%s: keys %q, want %q", m.name, k, m.want)
		}
		for _, k := range m.want {
			if v := doc.Lookup(k); k != "msg" && !v.Equal(was.Lookup(k)) {
				t.Errorf("%s: %s is %v, was %v", m.name, k, v, was.Lookup(k))
			}
		}
		if v := doc.Lookup("msg").StringValue(); v != "isdbgrid" {
			t.Errorf("%s: msg %q, want isdbgrid", m.name, v)
		}
	}
	// Connections opened before, or after it is off, get the bytes as sent.
	p.ClaimMongos(false)
	for name, tc := range map[string]struct {
		c    net.Conn
		want []byte
	}{"opened before": {before, want[len(first):]}, "opened after": {dial(t, p), want}} {
		got := make([]byte, len(tc.want))
		tc.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(tc.c, got); err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("connection %s: %v; the bytes changed: %t", name, err, !bytes.Equal(got, tc.want))
		}
	}
}

// bodyAt returns where the document of msg, an OP_MSG (its body section)
// or an OP_REPLY with one document, starts and ends, and its checksum if
// it has one.
func bodyAt(t *testing.T, msg []byte) (start, end int, sum []byte) {
	t.Helper()
	if binary.LittleEndian.Uint32(msg[12:]) == 1 {
		return 36, len(msg), nil
	}
	last := len(msg)
	if binary.LittleEndian.Uint32(msg[16:])&checksumPresent != 0 {
		last -= 4
		sum = msg[last:]
	}
	for i := 20; i < last; {
		size := int(binary.LittleEndian.Uint32(msg[i+1:]))
		if msg[i] == 0 {
			return i + 1, i + 1 + size, sum
		}
		i += 1 + size
	}
	t.Fatalf("no body section in % x", msg)
	return 0, 0, nil
}

func TestProxyClaimMongosClosesOnAnythingElse(t *testing.T) {
	for _, length := range []uint32{3, 1 << 31, 65 << 20} {
		garbage := binary.LittleEndian.AppendUint32(nil, length)
		p := newProxy(t, wireServer(t, append(garbage, make([]byte, 60)...)))
		p.ClaimMongos(true)
		c := dial(t, p)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
			t.Errorf("messageLength %d: read %q, %v; want the connection closed, nothing sent", length, got, err)
		}
	}
}
