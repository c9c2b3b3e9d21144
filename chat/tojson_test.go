package chat

import (
	"encoding/json"
	"testing"
)

// Expected strings below are what Python's json.dumps prints for the same
// data and arguments (transformers' tojson is a thin wrapper around it).
const tojsonDoc = `{"b": 1, "a": [1, 2.5, "x", {}, []], "c": null, "d": {"z": true, "y": false}}`

func TestTojson(t *testing.T) {
	tests := []struct {
		name string
		expr string // template expression applied to variable d
		data string // JSON for d; tojsonDoc when empty
		want string
	}{
		{name: "default keeps insertion order", expr: `d | tojson`,
			want: `{"b": 1, "a": [1, 2.5, "x", {}, []], "c": null, "d": {"z": true, "y": false}}`},
		{name: "indent int", expr: `d | tojson(indent=2)`,
			want: "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2.5,\n    \"x\",\n    {},\n    []\n  ],\n  \"c\": null,\n  \"d\": {\n    \"z\": true,\n    \"y\": false\n  }\n}"},
		{name: "indent positional", expr: `d.d | tojson(2)`,
			want: "{\n  \"z\": true,\n  \"y\": false\n}"},
		{name: "indent string", expr: `d.d | tojson(indent="\t")`,
			want: "{\n\t\"z\": true,\n\t\"y\": false\n}"},
		{name: "indent zero", expr: `d.a | tojson(indent=0)`,
			want: "[\n1,\n2.5,\n\"x\",\n{},\n[]\n]"},
		{name: "compact separators", expr: `d | tojson(separators=(",", ":"))`,
			want: `{"b":1,"a":[1,2.5,"x",{},[]],"c":null,"d":{"z":true,"y":false}}`},
		{name: "indent with explicit separators", expr: `d.d | tojson(indent=1, separators=[", ", ": "])`,
			want: "{\n \"z\": true, \n \"y\": false\n}"},
		{name: "sort keys", expr: `d | tojson(sort_keys=true)`,
			want: `{"a": [1, 2.5, "x", {}, []], "b": 1, "c": null, "d": {"y": false, "z": true}}`},
		{name: "string escapes, unicode kept", expr: `d | tojson`,
			data: `"é😀\u0001\u007f<>&'\"\\\n\t/"`,
			want: `"é😀\u0001` + "\x7f" + `<>&'\"\\\n\t/"`},
		{name: "ensure_ascii", expr: `d | tojson(ensure_ascii=true)`,
			data: `"é😀\u0001\u007f<>&'\"\\\n\t/"`,
			want: `"\u00e9\ud83d\ude00\u0001\u007f<>&'\"\\\n\t/"`},
		{name: "python float repr", expr: `d | tojson`,
			data: `[1.0, 1e-05, 0.0001, 1e16, 1e15, 0.1, 123456789.123, -0.0, 1e300, 2.5e-7, -1.5e22, 12345678901234567.0, 7]`,
			want: `[1.0, 1e-05, 0.0001, 1e+16, 1000000000000000.0, 0.1, 123456789.123, -0.0, 1e+300, 2.5e-07, -1.5e+22, 1.2345678901234568e+16, 7]`},
		{name: "spaces around the pipe", expr: `d.b|  tojson`, want: `1`},
		{name: "builtin filters still work", expr: `d.a | length`, want: `5`},
		{name: "tojson inside a string literal is text", expr: `"x | tojson(indent=2)"`, want: `x | tojson(indent=2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.data
			if data == "" {
				data = tojsonDoc
			}
			got := renderExpr(t, tt.expr, json.RawMessage(data))
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestTojsonErrors(t *testing.T) {
	tests := []struct {
		name, expr string
	}{
		{name: "undefined value", expr: `missing | tojson`},
		{name: "bad separators", expr: `d | tojson(separators=",")`},
		{name: "unknown keyword", expr: `d | tojson(default=1)`},
		{name: "bad indent", expr: `d | tojson(indent=[1])`},
		{name: "callable", expr: `raise_exception | tojson`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse("{{ " + tt.expr + " }}")
			if err != nil {
				t.Fatal(err)
			}
			out, err := tmpl.Render(nil, Options{Vars: map[string]any{"d": json.RawMessage(tojsonDoc)}})
			if err == nil {
				t.Fatalf("rendered %q, want an error", out)
			}
		})
	}
}

// renderExpr renders {{ expr }} with d bound to data.
func renderExpr(t *testing.T, expr string, data any) string {
	t.Helper()
	tmpl, err := Parse("{{ " + expr + " }}")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	out, err := tmpl.Render(nil, Options{Vars: map[string]any{"d": data}})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}
