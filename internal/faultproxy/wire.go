package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The MongoDB wire protocol, as much of it as ClaimMongos needs. Every
// message starts with a header of four little-endian int32s: messageLength
// (the header included), requestID, responseTo and opCode.
const (
	headerLen = 16

	opReply = 1    // legacy answer: responseFlags, cursorID, startingFrom, numberReturned, documents
	opMsg   = 2013 // flagBits, sections, and a CRC-32C checksum if flagBits says so

	msgChecksumPresent = 1 << 0 // OP_MSG flagBits

	// maxMessageLen bounds a message the proxy reads whole: servers send at
	// most 48,000,000 bytes (maxMessageSizeBytes).
	maxMessageLen = 64 << 20
)

var errNotWire = errors.New("faultproxy: not a MongoDB wire-protocol message")

// readMessage reads one whole wire-protocol message from r.
func readMessage(r io.Reader) ([]byte, error) {
	var header [headerLen]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := int32(binary.LittleEndian.Uint32(header[:]))
	if n < headerLen || n > maxMessageLen {
		return nil, fmt.Errorf("%w: messageLength %d", errNotWire, n)
	}
	msg := make([]byte, n)
	copy(msg, header[:])
	if _, err := io.ReadFull(r, msg[headerLen:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// claimMongos returns msg, or, if it answers a handshake, msg rewritten so
// that its document claims a mongos: an OP_MSG whose body section is a
// document with isWritablePrimary or ismaster, or an OP_REPLY (the answer
// to a first handshake sent as OP_QUERY) with one such document. A
// rewritten OP_MSG that had a checksum gets one computed afresh.
func claimMongos(msg []byte) []byte {
	switch binary.LittleEndian.Uint32(msg[12:]) {
	case opMsg:
		return claimMongosMsg(msg)
	case opReply:
		const docsAt = headerLen + 20
		if len(msg) < docsAt || binary.LittleEndian.Uint32(msg[docsAt-4:]) != 1 {
			return msg
		}
		if doc, ok := helloAsMongos(msg[docsAt:]); ok {
			return withLength(append(append([]byte(nil), msg[:docsAt]...), doc...))
		}
	}
	return msg
}

// claimMongosMsg is claimMongos for an OP_MSG.
func claimMongosMsg(msg []byte) []byte {
	const sectionsAt = headerLen + 4
	if len(msg) < sectionsAt {
		return msg
	}
	flags := binary.LittleEndian.Uint32(msg[headerLen:])
	end := len(msg)
	if flags&msgChecksumPresent != 0 {
		end -= 4
	}
	// Sections: kind 0 is one document (the body); kind 1 is an int32 size
	// (itself included), an identifier and documents.
	for i := sectionsAt; i < end; {
		kind := msg[i]
		size, ok := int32At(msg[:end], i+1)
		if !ok || size < 5 || i+1+size > end {
			return msg
		}
		if kind == 0 {
			doc, ok := helloAsMongos(msg[i+1 : i+1+size])
			if !ok {
				return msg
			}
			out := make([]byte, 0, len(msg)+len(doc)-size)
			out = append(out, msg[:i+1]...)
			out = append(out, doc...)
			out = append(out, msg[i+1+size:end]...)
			if flags&msgChecksumPresent != 0 {
				out = binary.LittleEndian.AppendUint32(out, 0) // room for it, once the length is right
				out = withLength(out)
				binary.LittleEndian.PutUint32(out[len(out)-4:], crc32.Checksum(out[:len(out)-4], castagnoli))
				return out
			}
			return withLength(out)
		}
		if kind != 1 {
			return msg
		}
		i += 1 + size
	}
	return msg
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// withLength sets the messageLength of msg to its length.
func withLength(msg []byte) []byte {
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// Top-level fields of a handshake answer.
var (
	helloKeys = []string{"isWritablePrimary", "ismaster"} // one is in every handshake answer
	// A driver goes by these before msg: a server with either is a replica
	// set member, whatever msg says.
	replicaSetKeys = []string{"setName", "isreplicaset"}
)

// helloAsMongos returns doc, a BSON document that must fill the slice, with
// msg "isdbgrid" and without replica set fields, and true, if doc is a
// handshake answer: one with a top-level isWritablePrimary or ismaster.
func helloAsMongos(doc []byte) ([]byte, bool) {
	n, ok := int32At(doc, 0)
	if !ok || n != len(doc) || n < 5 || doc[n-1] != 0 {
		return nil, false
	}
	out := make([]byte, 4, n+16)
	hello := false
	for i := 4; i < n-1; {
		key, next, ok := element(doc[:n-1], i)
		if !ok {
			return nil, false
		}
		switch {
		case inList(helloKeys, key):
			hello = true
		case key == "msg" || inList(replicaSetKeys, key):
			i = next
			continue
		}
		out = append(out, doc[i:next]...)
		i = next
	}
	if !hello {
		return nil, false
	}
	out = append(out, 0x02) // string
	out = append(out, "msg\x00"...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len("isdbgrid")+1))
	out = append(out, "isdbgrid\x00"...)
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out, true
}

func inList(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// int32At returns the little-endian int32 at b[i:], as an int.
func int32At(b []byte, i int) (int, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	return int(int32(binary.LittleEndian.Uint32(b[i:]))), true
}

// element returns the key of the BSON element at b[i:] and where the next
// one starts, or false if b holds no whole element there.
func element(b []byte, i int) (key string, next int, ok bool) {
	if i >= len(b) {
		return "", 0, false
	}
	typ := b[i]
	k := bytes.IndexByte(b[i+1:], 0)
	if k < 0 {
		return "", 0, false
	}
	key, v := string(b[i+1:i+1+k]), i+2+k
	size := -1
	switch typ {
	case 0x06, 0x0A, 0x7F, 0xFF: // undefined, null, max key, min key
		size = 0
	case 0x08: // boolean
		size = 1
	case 0x10: // int32
		size = 4
	case 0x01, 0x09, 0x11, 0x12: // double, date, timestamp, int64
		size = 8
	case 0x07: // ObjectId
		size = 12
	case 0x13: // decimal128
		size = 16
	case 0x02, 0x0D, 0x0E: // string, JavaScript, symbol: int32 length, then the bytes
		if n, ok := int32At(b, v); ok && n > 0 {
			size = 4 + n
		}
	case 0x03, 0x04, 0x0F: // document, array, code with scope: an int32 total length
		if n, ok := int32At(b, v); ok && n >= 5 {
			size = n
		}
	case 0x05: // binary: int32 length, subtype, the bytes
		if n, ok := int32At(b, v); ok && n >= 0 {
			size = 5 + n
		}
	case 0x0C: // DBPointer: a string, then an ObjectId
		if n, ok := int32At(b, v); ok && n > 0 {
			size = 4 + n + 12
		}
	case 0x0B: // regular expression: two C strings
		if p := bytes.IndexByte(b[min(v, len(b)):], 0); p >= 0 {
			if f := bytes.IndexByte(b[v+p+1:], 0); f >= 0 {
				size = p + 1 + f + 1
			}
		}
	}
	if size < 0 || v+size > len(b) {
		return "", 0, false
	}
	return key, v + size, true
}
