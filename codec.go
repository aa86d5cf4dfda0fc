package mongostore

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Codec encodes session values for the document, and back (Config.Codec).
// It must be safe for concurrent use. Decode gets only bytes the store
// encoded itself: their MAC is checked first.
type Codec interface {
	Encode(values map[any]any) ([]byte, error)
	Decode(data []byte) (map[any]any, error)
}

// registerGobTypes registers with gob the compact form's composite types,
// which a session in the gob form (one value without a compact form) holds
// as well, as gorilla/sessions registers []any for its flashes. It runs
// when the gob form is used, not at start-up: a name the application gave
// one of them (gob.Register(&time.Time{}) names it "*time.Time") stands,
// and gob's refusal of ours is recovered.
func registerGobTypes() {
	for _, v := range [...]any{time.Time{}, map[string]any{}, []any{}} {
		func() {
			defer func() { _ = recover() }()
			gob.Register(v)
		}()
	}
}

// gobDecode decodes the default codec's fallback, gob as in gorilla's
// stores: custom types must be registered with gob.Register.
func gobDecode(data []byte) (values map[any]any, err error) {
	// gob is not hardened against hostile input: the MAC keeps it away.
	registerGobTypes()
	defer func() {
		if r := recover(); r != nil {
			values, err = nil, fmt.Errorf("gob: malformed data: %v", r)
		}
	}()
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&values); err != nil {
		return nil, err
	}
	if values == nil {
		values = make(map[any]any)
	}
	return values, nil
}

// JSONCodec encodes values as a JSON object, for other languages. Keys
// must be strings; numbers come back as float64, structs as maps.
type JSONCodec struct{}

// Encode implements Codec.
func (JSONCodec) Encode(values map[any]any) ([]byte, error) {
	m := make(map[string]any, len(values))
	for k, v := range values {
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("json: session key of type %T is not a string", k)
		}
		m[ks] = v
	}
	return json.Marshal(m)
}

// Decode implements Codec.
func (JSONCodec) Decode(data []byte) (map[any]any, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	values := make(map[any]any, len(m))
	for k, v := range m {
		values[k] = v
	}
	return values, nil
}

// compactCodec is the default codec: a compact binary form of string,
// bool, the int, uint and float types, time.Time, []byte, []string, and
// []any and map[string]any of these (flashes are a []any), keyed by
// strings; a session holding anything else is encoded whole with gob.
// Its decodes share keys (see keyCache); the zero value shares none.
type compactCodec struct{ keys *keyCache }

// The first byte of compactCodec's output says which form follows.
const (
	compactForm byte = 'C'
	gobForm     byte = 'G'
)

// Value tags of the compact form. Integers: a varint (a uvarint for
// unsigned), the tag giving the type in the order of reflect.Kind; floats:
// their big-endian IEEE 754 bits; the rest: a length or count, then the
// bytes or elements.
const (
	tagNil, tagString, tagFalse, tagTrue  byte = 0, 1, 2, 3
	tagInt                                byte = 4 // to 8: int, int8, int16, int32, int64
	tagUint                               byte = 9 // to 13: uint, uint8, uint16, uint32, uint64
	tagFloat32, tagFloat64, tagTime       byte = 14, 15, 16
	tagBytes, tagStrings, tagList, tagMap byte = 17, 18, 19, 20
)

// maxCompactDepth bounds the nesting of lists and maps.
const maxCompactDepth = 32

// errNotCompact says a value has no compact form; Encode then uses gob.
var errNotCompact = errors.New("no compact form")

// encodeBufferSize is the capacity Encode starts with: most sessions'
// values take less, and are encoded without growing it.
const encodeBufferSize = 256

func (c compactCodec) Encode(values map[any]any) ([]byte, error) {
	return c.appendEncode(make([]byte, 0, encodeBufferSize), values)
}

// appendEncode appends the encoding of values to b, or returns the gob
// form, a new slice, for values the compact form cannot hold.
func (compactCodec) appendEncode(b []byte, values map[any]any) ([]byte, error) {
	var small [16]string // most sessions hold fewer values: no allocation
	keys := small[:0]
	for k := range values {
		ks, ok := k.(string)
		if !ok {
			return encodeGobForm(values)
		}
		keys = append(keys, ks)
	}
	b, err := appendEntries(append(b, compactForm), keys, func(k string) any { return values[k] }, 0)
	if errors.Is(err, errNotCompact) {
		return encodeGobForm(values)
	}
	return b, err
}

// encodesTo reports whether data is values' compact form, byte for byte,
// without sorting or copying values' keys (of up to 32 bytes).
func encodesTo(buf, data []byte, values map[any]any) bool {
	if len(data) == 0 || data[0] != compactForm {
		return false
	}
	n, k := uvarint(data[1:])
	if k <= 0 || n != uint64(len(values)) {
		return false
	}
	off, prev := 1+k, []byte(nil)
	for i := range n {
		l, k := uvarint(data[off:])
		if k <= 0 || l > uint64(len(data)-off-k) {
			return false
		}
		key := data[off+k : off+k+int(l)]
		v, ok := values[string(key)]
		if !ok || (i > 0 && bytes.Compare(prev, key) >= 0) { // in order, so n distinct keys: all of values'
			return false
		}
		off += k + int(l)
		enc, err := appendValue(buf[:0], v, 0)
		if err != nil || !bytes.HasPrefix(data[off:], enc) {
			return false
		}
		off, prev, buf = off+len(enc), key, enc
	}
	return off == len(data)
}

// uvarint reads a uvarint as binary.AppendUvarint writes it: one written
// longer than need be gives k ≤ 0, as a malformed one does.
func uvarint(b []byte) (v uint64, k int) {
	if v, k = binary.Uvarint(b); k > 1 && b[k-1] == 0 {
		return 0, 0
	}
	return v, k
}

// keyCache holds session keys boxed as the map's keys, for the decodes of
// one store to share: sessions hold the same few keys. Reads take no lock.
type keyCache struct {
	mu sync.Mutex // serializes additions
	m  atomic.Pointer[map[string]any]
}

// maxCachedKeys and maxCachedKeyLen bound what a keyCache holds.
const maxCachedKeys, maxCachedKeyLen = 256, 64

// key returns s boxed, shared if c (which may be nil) holds it or takes it.
func (c *keyCache) key(s string) any {
	if c == nil {
		return s
	}
	if k, ok := c.load()[s]; ok {
		return k
	}
	if len(s) > maxCachedKeyLen {
		return s
	}
	s = strings.Clone(s) // s may be part of a larger string
	k := any(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.load(); len(old) < maxCachedKeys {
		m := make(map[string]any, len(old)+1)
		maps.Copy(m, old)
		m[s] = k
		c.m.Store(&m)
	}
	return k
}

func (c *keyCache) load() map[string]any {
	if m := c.m.Load(); m != nil {
		return *m
	}
	return nil
}

// canonical reports whether data, which codec encoded, is the default
// codec's compact form: its keys sorted, the only encoding of its values,
// so that other bytes hold other values (but for a float's sign of zero).
func canonical(codec Codec, data []byte) bool {
	_, ok := codec.(compactCodec)
	return ok && len(data) > 0 && data[0] == compactForm
}

func encodeGobForm(values map[any]any) ([]byte, error) {
	registerGobTypes()
	buf := bytes.NewBuffer([]byte{gobForm})
	if err := gob.NewEncoder(buf).Encode(values); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendEntries appends the count of keys, then each key, sorted, and its value.
func appendEntries(b []byte, keys []string, value func(string) any, depth int) ([]byte, error) {
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	var err error
	for _, k := range keys {
		if b, err = appendValue(appendString(b, k), value(k), depth); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendString[S string | []byte](b []byte, s S) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxCompactDepth {
		return b, errNotCompact
	}
	switch v := v.(type) {
	case []any:
		b = binary.AppendUvarint(append(b, tagList), uint64(len(v)))
		var err error
		for _, e := range v {
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return b, nil
	case map[string]any:
		return appendEntries(append(b, tagMap), slices.Collect(maps.Keys(v)), func(k string) any { return v[k] }, depth+1)
	}
	return appendScalar(b, v)
}

// appendScalar appends v, which holds no list or map.
func appendScalar(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, tagNil), nil
	case string:
		return appendString(append(b, tagString), v), nil
	case bool:
		if v {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int, int8, int16, int32, int64: // exactly these types: a named one takes gob
		rv := reflect.ValueOf(v)
		return binary.AppendVarint(append(b, tagInt+byte(rv.Kind()-reflect.Int)), rv.Int()), nil
	case uint, uint8, uint16, uint32, uint64:
		rv := reflect.ValueOf(v)
		return binary.AppendUvarint(append(b, tagUint+byte(rv.Kind()-reflect.Uint)), rv.Uint()), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(b, tagFloat32), math.Float32bits(v)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, tagFloat64), math.Float64bits(v)), nil
	case time.Time:
		t, err := v.MarshalBinary()
		if err != nil {
			return b, errNotCompact // gob reports the error
		}
		return appendString(append(b, tagTime), t), nil
	case []byte:
		return appendString(append(b, tagBytes), v), nil
	case []string:
		b = binary.AppendUvarint(append(b, tagStrings), uint64(len(v)))
		for _, s := range v {
			b = appendString(b, s)
		}
		return b, nil
	}
	return b, errNotCompact
}

func (c compactCodec) Decode(data []byte) (map[any]any, error) {
	if len(data) == 0 {
		return nil, errors.New("compact: no data")
	}
	switch data[0] {
	case gobForm:
		return gobDecode(data[1:])
	case compactForm:
	default:
		return nil, fmt.Errorf("compact: unknown form %#x", data[0])
	}
	d := compactDecoder{b: data[1:], s: string(data[1:])}
	n := d.count()
	values := make(map[any]any, presize(n))
	for i := 0; i < n && d.err == nil; i++ {
		k := c.keys.key(d.string())
		values[k] = d.value(0)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return values, nil
}

// compactDecoder reads the compact form, whatever the bytes: the first
// error stops it. It allocates for what it decodes, never for a count the
// input merely claims (see presize). Its strings are slices of s, a copy
// of all of b made once.
type compactDecoder struct {
	b   []byte
	s   string
	err error
}

func (d *compactDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("compact: malformed data: %s", what)
	}
	d.b = nil
}

// varint reads a varint, or with unsigned a uvarint, as a uint64.
func (d *compactDecoder) varint(unsigned bool) uint64 {
	v, n := uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	if !unsigned { // binary.AppendVarint zigzags a signed one into a uvarint
		v = uint64(int64(v>>1) ^ -int64(v&1))
	}
	return v
}

// count reads an element count, which cannot exceed the bytes left (every
// element takes at least one).
func (d *compactDecoder) count() int {
	n := d.varint(true)
	if n > uint64(len(d.b)) {
		d.fail("count larger than the data")
		return 0
	}
	return int(n)
}

// presize is the capacity to allocate for n elements that the input
// claims: at most 16; growth follows the elements actually decoded.
func presize(n int) int { return min(n, 16) }

func (d *compactDecoder) bytes() []byte {
	n := d.count()
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// time reads a time in MarshalBinary's form, refusing one it cannot write
// back (a zone offset between one and two minutes west, with seconds).
func (d *compactDecoder) time() time.Time {
	b := d.bytes()
	var t time.Time
	if err := t.UnmarshalBinary(b); err != nil {
		d.fail("bad time")
		return t
	}
	if len(b) == 16 && b[0] == 2 && b[15] >= 0x80 {
		// MarshalBinary writes a zone offset's seconds as an int8, and
		// UnmarshalBinary reads them back as a byte: 256 s east of the
		// offset a time west of UTC had, seconds and all (historic LMT zones).
		_, offset := t.Zone()
		t = t.In(time.FixedZone("", offset-256))
	}
	if _, err := t.AppendBinary(make([]byte, 0, 16)); err != nil {
		d.fail("a time with no binary form")
	}
	return t
}

func (d *compactDecoder) string() string {
	b := d.bytes()
	end := len(d.s) - len(d.b) // b ends where the bytes left begin
	return d.s[end-len(b) : end]
}

// fixed reads n bytes.
func (d *compactDecoder) fixed(n int) []byte {
	if len(d.b) < n {
		d.fail("short fixed-size value")
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// integer reads an integer of the type its tag names.
func (d *compactDecoder) integer(tag byte) any {
	x := d.varint(tag >= tagUint)
	switch tag {
	case tagInt:
		return signed[int](d, int64(x))
	case tagInt + 1:
		return signed[int8](d, int64(x))
	case tagInt + 2:
		return signed[int16](d, int64(x))
	case tagInt + 3:
		return signed[int32](d, int64(x))
	case tagInt + 4:
		return int64(x)
	case tagUint:
		return unsigned[uint](d, x)
	case tagUint + 1:
		return unsigned[uint8](d, x)
	case tagUint + 2:
		return unsigned[uint16](d, x)
	case tagUint + 3:
		return unsigned[uint32](d, x)
	}
	return x
}

// signed returns x as a T, which must hold it.
func signed[T int | int8 | int16 | int32](d *compactDecoder, x int64) any {
	if v := T(x); int64(v) == x {
		return v
	}
	d.fail("integer out of range")
	return T(0)
}

// unsigned returns x as a T, which must hold it.
func unsigned[T uint | uint8 | uint16 | uint32](d *compactDecoder, x uint64) any {
	if v := T(x); uint64(v) == x {
		return v
	}
	d.fail("integer out of range")
	return T(0)
}

func (d *compactDecoder) value(depth int) any {
	if depth > maxCompactDepth || len(d.b) == 0 {
		d.fail("missing or too deeply nested value")
		return nil
	}
	tag := d.b[0]
	d.b = d.b[1:]
	switch {
	case tag >= tagInt && tag < tagFloat32:
		return d.integer(tag)
	case tag == tagNil:
		return nil
	case tag == tagString:
		return d.string()
	case tag == tagFalse || tag == tagTrue:
		return tag == tagTrue
	case tag == tagFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(d.fixed(4)))
	case tag == tagFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(d.fixed(8)))
	case tag == tagTime:
		return d.time()
	case tag == tagBytes:
		if b := d.bytes(); len(b) > 0 {
			return bytes.Clone(b)
		}
		return []byte(nil) // as gob decodes an empty slice
	case tag == tagStrings:
		return d.strings()
	case tag == tagList:
		return d.list(depth + 1)
	case tag == tagMap:
		return d.stringMap(depth + 1)
	}
	d.fail(fmt.Sprintf("unknown tag %d", tag))
	return nil
}

// stringMap reads a count and that many keys and values at depth.
func (d *compactDecoder) stringMap(depth int) map[string]any {
	n := d.count()
	v := make(map[string]any, presize(n))
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		v[k] = d.value(depth)
	}
	return v
}

// strings reads a count and that many strings; none gives a nil slice,
// as gob decodes an empty one.
func (d *compactDecoder) strings() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := make([]string, 0, presize(n))
	for i := 0; i < n && d.err == nil; i++ {
		v = append(v, d.string())
	}
	return v
}

// list reads a count and that many values at depth; none gives a nil
// slice, as gob decodes an empty one.
func (d *compactDecoder) list(depth int) []any {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := make([]any, 0, presize(n))
	for i := 0; i < n && d.err == nil; i++ {
		v = append(v, d.value(depth))
	}
	return v
}

// copyable reports whether cloneValues copies values (non-nil), and about
// how many bytes a copy holds: its keys and values are of immutable kinds
// (see immutable), or a []byte, []string, or []any of immutable kinds
// (flashes).
func copyable(values map[any]any) (size int, ok bool) {
	if values == nil {
		return 0, false
	}
	size = 256
	for k, v := range values {
		if !immutable(k) {
			return 0, false
		}
		size += 48 + valueSize(k)
		switch e := v.(type) {
		case []byte:
			size += 24 + len(e)
		case []string:
			size += 24
			for _, s := range e {
				size += 16 + len(s)
			}
		case []any:
			size += 24
			for _, x := range e {
				if !immutable(x) {
					return 0, false
				}
				size += 16 + valueSize(x)
			}
		default:
			if !immutable(v) {
				return 0, false
			}
			size += valueSize(v)
		}
	}
	return size, true
}

// immutable reports whether v is nil or of a kind no one can change
// through an interface holding it: a string, bool, number or time.Time.
func immutable(v any) bool {
	switch v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64,
		complex64, complex128, time.Time:
		return true
	}
	return false
}

// valueSize is about the bytes an immutable value holds beyond its
// interface.
func valueSize(v any) int {
	if s, ok := v.(string); ok {
		return 16 + len(s)
	}
	return 24
}

// cloneValues returns a copy of copyable values that a handler may change
// without changing values: the immutable keys and values shared, the
// slices copied.
func cloneValues(values map[any]any) map[any]any {
	out := make(map[any]any, len(values))
	for k, v := range values {
		switch e := v.(type) {
		case []byte:
			v = bytes.Clone(e)
		case []string:
			v = slices.Clone(e)
		case []any:
			v = slices.Clone(e)
		}
		out[k] = v
	}
	return out
}
