package mongostore

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"fmt"
)

// Codec encodes the values of a session (sessions.Session.Values) to the
// bytes stored in its document, and back. Implementations must be safe for
// concurrent use. The store only passes Decode bytes whose MAC it has
// checked, that is bytes it encoded itself.
type Codec interface {
	Encode(values map[any]any) ([]byte, error)
	Decode(data []byte) (map[any]any, error)
}

// GobCodec encodes values with encoding/gob, as gorilla's stores do: every
// type gob supports round-trips, and custom types must be registered with
// gob.Register. It is the default codec.
type GobCodec struct{}

// Encode implements Codec.
func (GobCodec) Encode(values map[any]any) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(values); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode implements Codec.
func (GobCodec) Decode(data []byte) (values map[any]any, err error) {
	// gob reports malformed input as errors, but it is not hardened against
	// hostile input (it has panicked in past releases, and a few bytes can
	// make it allocate without bound). The store's MAC check keeps such bytes
	// away; recover is the last line for the panics.
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
