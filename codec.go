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
	"slices"
	"strconv"
	"time"
)

// Codec encodes the values of a session (sessions.Session.Values) to the
// bytes stored in its document, and back (Config.Codec). Implementations
// must be safe for concurrent use. The store passes Decode only bytes it
// encoded itself: their MAC is checked first.
type Codec interface {
	Encode(values map[any]any) ([]byte, error)
	Decode(data []byte) (map[any]any, error)
}

// gobEncode and gobDecode are the compact codec's fallback for values it
// has no form of its own for: every type gob supports round-trips, custom
// types once registered with gob.Register, as in gorilla's stores.
func gobEncode(values map[any]any) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(values); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gobDecode(data []byte) (values map[any]any, err error) {
	// gob is not hardened against hostile input; the MAC keeps such bytes
	// away, and recover is the last line for its panics.
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

// JSONCodec encodes values as a JSON object, which other languages can read.
// Keys must be strings. JSON does not keep Go types: numbers come back as
// float64, structs as map[string]any, and flashes as []any.
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

// compactCodec is the default codec. It encodes what sessions usually
// hold in a compact binary form, fast to write and read: string, bool,
// every int and uint type, float32 and float64, time.Time, []byte,
// []string, and []any and map[string]any of such values (flashes are a
// []any), keyed by strings. A session holding anything else (a struct, a
// type registered with gob) is encoded whole with gob, so every value a
// gorilla application stores round-trips, with its Go type.
type compactCodec struct{}

// The first byte of compactCodec's output says which form follows.
const (
	compactForm byte = 'C'
	gobForm     byte = 'G'
)

// Value tags of the compact form.
const (
	tagNil byte = iota
	tagString
	tagFalse
	tagTrue
	tagInt
	tagInt8
	tagInt16
	tagInt32
	tagInt64
	tagUint
	tagUint8
	tagUint16
	tagUint32
	tagUint64
	tagFloat32
	tagFloat64
	tagTime
	tagBytes
	tagStrings
	tagList
	tagMap
)

// maxCompactDepth bounds the nesting of lists and maps.
const maxCompactDepth = 32

// errNotCompact says a value has no compact form; Encode then uses gob.
var errNotCompact = errors.New("no compact form")

func (compactCodec) Encode(values map[any]any) ([]byte, error) {
	if b, err := appendCompactMap([]byte{compactForm}, values); !errors.Is(err, errNotCompact) {
		return b, err
	}
	g, err := gobEncode(values)
	if err != nil {
		return nil, err
	}
	return append([]byte{gobForm}, g...), nil
}

func appendCompactMap(b []byte, values map[any]any) ([]byte, error) {
	var small [16]string // most sessions hold fewer values: no allocation
	keys := small[:0]
	for k := range values {
		ks, ok := k.(string)
		if !ok {
			return b, errNotCompact
		}
		keys = append(keys, ks)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	var err error
	for _, k := range keys {
		b = appendCompactString(b, k)
		if b, err = appendCompactValue(b, values[k], 0); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendCompactString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendCompactValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxCompactDepth {
		return b, errNotCompact
	}
	switch v := v.(type) {
	case nil:
		return append(b, tagNil), nil
	case string:
		return appendCompactString(append(b, tagString), v), nil
	case bool:
		if v {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int:
		return binary.AppendVarint(append(b, tagInt), int64(v)), nil
	case int8:
		return binary.AppendVarint(append(b, tagInt8), int64(v)), nil
	case int16:
		return binary.AppendVarint(append(b, tagInt16), int64(v)), nil
	case int32:
		return binary.AppendVarint(append(b, tagInt32), int64(v)), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt64), v), nil
	case uint:
		return binary.AppendUvarint(append(b, tagUint), uint64(v)), nil
	case uint8:
		return binary.AppendUvarint(append(b, tagUint8), uint64(v)), nil
	case uint16:
		return binary.AppendUvarint(append(b, tagUint16), uint64(v)), nil
	case uint32:
		return binary.AppendUvarint(append(b, tagUint32), uint64(v)), nil
	case uint64:
		return binary.AppendUvarint(append(b, tagUint64), v), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(b, tagFloat32), math.Float32bits(v)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, tagFloat64), math.Float64bits(v)), nil
	case time.Time:
		t, err := v.MarshalBinary()
		if err != nil {
			return b, errNotCompact // gob reports the error, as it always did
		}
		return append(binary.AppendUvarint(append(b, tagTime), uint64(len(t))), t...), nil
	case []byte:
		return append(binary.AppendUvarint(append(b, tagBytes), uint64(len(v))), v...), nil
	case []string:
		b = binary.AppendUvarint(append(b, tagStrings), uint64(len(v)))
		for _, s := range v {
			b = appendCompactString(b, s)
		}
		return b, nil
	case []any:
		b = binary.AppendUvarint(append(b, tagList), uint64(len(v)))
		var err error
		for _, e := range v {
			if b, err = appendCompactValue(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return b, nil
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		b = binary.AppendUvarint(append(b, tagMap), uint64(len(keys)))
		var err error
		for _, k := range keys {
			b = appendCompactString(b, k)
			if b, err = appendCompactValue(b, v[k], depth+1); err != nil {
				return b, err
			}
		}
		return b, nil
	}
	return b, errNotCompact
}

func (compactCodec) Decode(data []byte) (map[any]any, error) {
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
	d := compactDecoder{b: data[1:]}
	n := d.count()
	values := make(map[any]any, presize(n))
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
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
// input merely claims (see presize).
type compactDecoder struct {
	b   []byte
	err error
}

func (d *compactDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("compact: malformed data: %s", what)
	}
	d.b = nil
}

func (d *compactDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *compactDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an element count, which cannot exceed the bytes left (every
// element takes at least one).
func (d *compactDecoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("count larger than the data")
		return 0
	}
	return int(n)
}

func (d *compactDecoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// presize is the capacity to allocate for n elements that the input
// claims: at most 16, and growth follows the elements actually decoded
// (a count of a million, in a megabyte of junk, once allocated 41 MiB).
func presize(n int) int { return min(n, 16) }

func (d *compactDecoder) string() string { return string(d.bytes()) }

func (d *compactDecoder) fixed(n int) []byte {
	if len(d.b) < n {
		d.fail("short fixed-size value")
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// intIn reads a varint that must fit in bits.
func (d *compactDecoder) intIn(bits int) int64 {
	v := d.varint()
	if bits < 64 && (v < -1<<(bits-1) || v >= 1<<(bits-1)) {
		d.fail("integer out of range")
	}
	return v
}

// uintIn reads a uvarint that must fit in bits.
func (d *compactDecoder) uintIn(bits int) uint64 {
	v := d.uvarint()
	if bits < 64 && v >= 1<<bits {
		d.fail("integer out of range")
	}
	return v
}

func (d *compactDecoder) value(depth int) any {
	if depth > maxCompactDepth {
		d.fail("nested too deep")
		return nil
	}
	if len(d.b) == 0 {
		d.fail("missing value")
		return nil
	}
	tag := d.b[0]
	d.b = d.b[1:]
	switch tag {
	case tagNil:
		return nil
	case tagString:
		return d.string()
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return int(d.intIn(strconv.IntSize))
	case tagInt8:
		return int8(d.intIn(8))
	case tagInt16:
		return int16(d.intIn(16))
	case tagInt32:
		return int32(d.intIn(32))
	case tagInt64:
		return d.varint()
	case tagUint:
		return uint(d.uintIn(strconv.IntSize))
	case tagUint8:
		return uint8(d.uintIn(8))
	case tagUint16:
		return uint16(d.uintIn(16))
	case tagUint32:
		return uint32(d.uintIn(32))
	case tagUint64:
		return d.uvarint()
	case tagFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(d.fixed(4)))
	case tagFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(d.fixed(8)))
	case tagTime:
		var t time.Time
		if err := t.UnmarshalBinary(d.bytes()); err != nil && d.err == nil {
			d.fail("bad time")
		}
		return t
	case tagBytes:
		b := d.bytes()
		if len(b) == 0 {
			return []byte(nil) // as gob decodes an empty slice
		}
		return bytes.Clone(b)
	case tagStrings:
		n := d.count()
		if n == 0 {
			return []string(nil)
		}
		v := make([]string, 0, presize(n))
		for i := 0; i < n && d.err == nil; i++ {
			v = append(v, d.string())
		}
		return v
	case tagList:
		n := d.count()
		if n == 0 {
			return []any(nil)
		}
		v := make([]any, 0, presize(n))
		for i := 0; i < n && d.err == nil; i++ {
			v = append(v, d.value(depth+1))
		}
		return v
	case tagMap:
		n := d.count()
		v := make(map[string]any, presize(n))
		for i := 0; i < n && d.err == nil; i++ {
			k := d.string()
			v[k] = d.value(depth + 1)
		}
		return v
	}
	d.fail(fmt.Sprintf("unknown tag %d", tag))
	return nil
}
