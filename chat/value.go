package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxValueDepth bounds the nesting of converted data. JSON from a request
// can nest arbitrarily deep; recursing without a bound would let one request
// exhaust the goroutine stack, which Go cannot recover from.
const maxValueDepth = 256

// toValue converts a JSON-like Go value to a template value.
//
// Accepted: nil, bool, string, every integer and float kind, json.Number,
// json.RawMessage (decoded with object key order preserved), jinja.Value,
// slices/arrays and maps with string keys (map keys are sorted because Go maps
// have no order). Any other type (typically a struct with json tags) is
// marshalled with encoding/json and decoded back, so its key order is the
// struct's field order.
//
// Numbers follow Python's json module where Go loses the distinction: a
// float64 with an integral value becomes an int (JSON "1" decodes to float64
// 1 in Go but to int 1 in Python, and templates print them differently).
// Pass json.Number or json.RawMessage to keep "1.0" a float.
func toValue(v any, depth int) (jinja.Value, error) {
	if depth > maxValueDepth {
		return jinja.Value{}, fmt.Errorf("chat: data nested deeper than %d levels", maxValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case float64:
		return floatValue(x)
	case float32:
		return floatValue(float64(x))
	case json.Number:
		return numberValue(x)
	case json.RawMessage:
		return decodeJSON(x)
	case []any:
		items := make([]jinja.Value, len(x))
		for i, item := range x {
			iv, err := toValue(item, depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = iv
		}
		return jinja.NewList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			iv, err := toValue(x[k], depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, iv)
		}
		return d, nil
	}
	return reflectValue(reflect.ValueOf(v), depth)
}

// reflectValue handles the kinds the fast path in toValue does not name:
// other integer widths, typed slices and maps, pointers, and structs.
func reflectValue(rv reflect.Value, depth int) (jinja.Value, error) {
	switch rv.Kind() {
	case reflect.Int8, reflect.Int16:
		return jinja.NewInt(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return jinja.NewFloat(float64(u)), nil
		}
		return jinja.NewInt(int64(u)), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return jinja.None(), nil
		}
		items := make([]jinja.Value, rv.Len())
		for i := range rv.Len() {
			iv, err := toValue(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = iv
		}
		return jinja.NewList(items), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			return jinja.None(), nil
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			iv, err := toValue(rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface(), depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, iv)
		}
		return d, nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return jinja.None(), nil
		}
	}
	if !rv.IsValid() {
		return jinja.None(), nil
	}
	// Structs and anything else JSON can represent: let encoding/json apply
	// the json tags, then decode in order.
	raw, err := json.Marshal(rv.Interface())
	if err != nil {
		return jinja.Value{}, fmt.Errorf("chat: cannot use %s as template data: %w", rv.Type(), err)
	}
	return decodeJSON(raw)
}

func floatValue(f float64) (jinja.Value, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return jinja.Value{}, fmt.Errorf("chat: number %v is not valid JSON data", f)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return jinja.NewInt(int64(f)), nil
	}
	return jinja.NewFloat(f), nil
}

// numberValue maps a JSON number as Python's json module does: no fraction
// or exponent means int, anything else float. Integers outside int64, which
// Python keeps exact, become the nearest float.
func numberValue(n json.Number) (jinja.Value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := n.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
	}
	f, err := n.Float64()
	if err != nil {
		return jinja.Value{}, fmt.Errorf("chat: invalid JSON number %q", s)
	}
	return jinja.NewFloat(f), nil
}

// decodeJSON decodes one JSON document into a template value, keeping object
// keys in document order as Python's json module does (templates that
// serialise tools with tojson print keys in that order).
func decodeJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeNext(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Value{}, errors.New("chat: trailing data after JSON value")
	}
	return v, nil
}

func decodeNext(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxValueDepth {
		return jinja.Value{}, fmt.Errorf("chat: JSON nested deeper than %d levels", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, fmt.Errorf("chat: invalid JSON: %w", err)
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t)
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				item, err := decodeNext(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, fmt.Errorf("chat: invalid JSON: %w", err)
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, fmt.Errorf("chat: invalid JSON: %w", err)
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Value{}, fmt.Errorf("chat: invalid JSON object key %v", kt)
				}
				item, err := decodeNext(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, item)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, fmt.Errorf("chat: invalid JSON: %w", err)
			}
			return d, nil
		}
	}
	return jinja.Value{}, fmt.Errorf("chat: unexpected JSON token %v", tok)
}

// MessagesFromJSON decodes a JSON array of chat messages (the "messages" of
// an OpenAI chat request) for Render. Each message's fields stay raw JSON, so
// nested objects such as tool calls keep their key order; the message's own
// keys are a Go map and therefore iterate sorted.
func MessagesFromJSON(data []byte) ([]map[string]any, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("chat: messages must be a JSON array of objects: %w", err)
	}
	msgs := make([]map[string]any, len(raw))
	for i, m := range raw {
		if m == nil {
			return nil, fmt.Errorf("chat: message %d is null", i)
		}
		msg := make(map[string]any, len(m))
		for k, v := range m {
			msg[k] = v
		}
		msgs[i] = msg
	}
	return msgs, nil
}
