package chat

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestToValue(t *testing.T) {
	type call struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
		ID        string         `json:"id,omitempty"`
	}
	var nilPtr *call
	tests := []struct {
		name string
		data any
		want string // d | tojson
	}{
		{name: "raw JSON keeps key order", data: json.RawMessage(`{"z": 1, "a": {"y": 2, "b": 3}}`), want: `{"z": 1, "a": {"y": 2, "b": 3}}`},
		{name: "raw JSON numbers as Python reads them", data: json.RawMessage(`[7, 7.0, 1e2, -0]`), want: `[7, 7.0, 100.0, 0]`},
		// Python would keep the exact integer; the engine's ints are int64.
		{name: "integer beyond int64 becomes a float", data: json.RawMessage(`123456789012345678901234`), want: `1.2345678901234569e+23`},
		{name: "go maps are sorted", data: map[string]any{"z": 1, "a": 2}, want: `{"a": 2, "z": 1}`},
		{name: "integral float64 becomes int", data: []any{3.0, 2.5, -1.0, float32(0.5)}, want: `[3, 2.5, -1, 0.5]`},
		{name: "json.Number", data: []any{json.Number("4"), json.Number("4.0"), json.Number("1e3")}, want: `[4, 4.0, 1000.0]`},
		{name: "struct uses field order and tags", data: call{Name: "f", Arguments: map[string]any{"b": 1, "a": "x"}}, want: `{"name": "f", "arguments": {"a": "x", "b": 1}}`},
		{name: "typed containers", data: map[string][]string{"k": {"a", "b"}}, want: `{"k": ["a", "b"]}`},
		{name: "other integer kinds", data: []any{int8(-3), uint16(9), uint64(math.MaxUint64), int32(5)}, want: `[-3, 9, 1.8446744073709552e+19, 5]`},
		{name: "nil values", data: []any{nil, nilPtr, []string(nil), map[string]int(nil)}, want: `[null, null, null, null]`},
		{name: "slice of maps", data: []map[string]any{{"role": "user"}}, want: `[{"role": "user"}]`},
		{name: "array", data: [2]bool{true, false}, want: `[true, false]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderExpr(t, `d | tojson`, tt.data); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestToValueErrors(t *testing.T) {
	deep := strings.Repeat("[", maxValueDepth+2) + strings.Repeat("]", maxValueDepth+2)
	var nested any = "leaf"
	for range maxValueDepth + 2 {
		nested = []any{nested}
	}
	tests := []struct {
		name string
		data any
	}{
		{name: "NaN", data: math.NaN()},
		{name: "infinity", data: []any{math.Inf(1)}},
		{name: "channel", data: make(chan int)},
		{name: "function", data: func() {}},
		{name: "invalid raw JSON", data: json.RawMessage(`{"a": }`)},
		{name: "trailing raw JSON", data: json.RawMessage(`{} {}`)},
		{name: "empty raw JSON", data: json.RawMessage(``)},
		{name: "raw JSON too deep", data: json.RawMessage(deep)},
		{name: "go value too deep", data: nested},
		{name: "bad json.Number", data: json.Number("12abc")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := mustParse(t, `{{ d }}`).Render(nil, Options{Vars: map[string]any{"d": tt.data}})
			if err == nil {
				t.Fatalf("rendered %.60q, want an error", out)
			}
		})
	}
}
