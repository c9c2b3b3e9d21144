package chat

import (
	"strings"
	"testing"
)

func TestInstrument(t *testing.T) {
	const (
		enter = "{{ __chat_enter() }}"
		leave = "{{ __chat_leave() }}"
		tick  = "{{ __chat_tick() }}"
	)
	tests := []struct {
		name, src, want string
	}{
		{name: "tojson in expression", src: `{{ x | tojson }}`, want: `{{ x | __chat_tojson }}`},
		{name: "tojson in statement with trim markers", src: `{%- set y = x|tojson(indent=2) -%}`, want: `{%- set y = x|__chat_tojson(indent=2) -%}`},
		{name: "several in one tag", src: `{{ a|tojson ~ b | tojson }}`, want: `{{ a|__chat_tojson ~ b | __chat_tojson }}`},
		{name: "string literals untouched", src: `{{ "|tojson" ~ '|tojson' ~ "\"|tojson" }}`, want: `{{ "|tojson" ~ '|tojson' ~ "\"|tojson" }}`},
		{name: "text and comments untouched", src: `a | tojson {# x|tojson {% for %} #}`, want: `a | tojson {# x|tojson {% for %} #}`},
		{name: "raw block untouched", src: `{% raw %}{{ x|tojson }}{% for a in b %}{% endraw %}{{ x|tojson }}`, want: `{% raw %}{{ x|tojson }}{% for a in b %}{% endraw %}{{ x|__chat_tojson }}`},
		{name: "longer names untouched", src: `{{ x|tojsonx }}{{ x.tojson }}`, want: `{{ x|tojsonx }}{{ x.tojson }}`},
		{name: "closer inside a string", src: `{{ "}}" | tojson }}`, want: `{{ "}}" | __chat_tojson }}`},
		{name: "unclosed tag left for the parser", src: `{{ x | tojson `, want: `{{ x | tojson `},
		{name: "lone braces", src: `{ {x} }{`, want: `{ {x} }{`},
		{name: "macro bracketed", src: `{% macro f(a) %}x{% endmacro %}`, want: `{% macro f(a) %}` + enter + `x` + leave + `{% endmacro %}`},
		{name: "for loop ticks", src: `{% for m in messages %}x{% else %}y{% endfor %}`, want: `{% for m in messages %}` + tick + `x{% else %}y{% endfor %}`},
		{name: "trim markers", src: "{%- macro f() -%}\n x \n{%- endmacro -%}{%- for a in b -%} {% endfor %}",
			want: "{%- macro f() -%}" + enter + "\n x \n" + leave + "{%- endmacro -%}{%- for a in b -%}" + tick + " {% endfor %}"},
		{name: "no space before parenthesis", src: `{%macro f()%}{%endmacro%}`, want: `{%macro f()%}` + enter + leave + `{%endmacro%}`},
		{name: "words that merely start with for", src: `{% format %}{% formula = 1 %}`, want: `{% format %}{% formula = 1 %}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := instrument(tt.src); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestInstrumentKeepsWhitespace renders whitespace-sensitive macros and loops;
// the expected strings are Jinja2's output with trim_blocks and lstrip_blocks.
func TestInstrumentKeepsWhitespace(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{name: "block tags on their own lines",
			src:  "{% macro f(x) %}\n  <{{ x }}>\n  {% endmacro %}\n{% for i in [1, 2] %}\n    {{ f(i) }}\n{% endfor %}\nend",
			want: "      <1>\n\n      <2>\n\nend"},
		{name: "dash markers",
			src:  "{%- macro f(x) -%}\n  [{{ x }}]  \n{%- endmacro -%}\n{%- for i in [1, 2] -%}\n  {{ f(i) }} \n{%- endfor %}\nend",
			want: "[1][2]end"},
		{name: "recursive macro",
			src:  "{% macro f(n) %}{% if n > 0 %}{{ n }},{{ f(n - 1) }}{% endif %}{% endmacro %}\n{{ f(3) }}",
			want: "3,2,1,"},
		{name: "loop body starting with blank lines",
			src:  "{%- for i in [1] %}\n\n\nF{{ i }}\n  {% endfor %}\n\nend",
			want: "\n\nF1\n\nend"},
		{name: "macro body starting with blank lines",
			src:  "{% macro f() %}\n\nA\n{% endmacro %}\n\n{{ f() }}|",
			want: "\n\nA\n|"},
		{name: "nested loops with else",
			src:  "{% for a in [1, 2] %}\n{% for b in [] %}\nx\n{% else %}\n  {{ a }}\n{% endfor %}\n{% endfor %}",
			want: "  1\n  2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustParse(t, tt.src).Render(nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestGuardLimits(t *testing.T) {
	// MaxSteps is lowered to keep the test fast; the depth limit is fixed.
	tests := []struct {
		name, src, wantErr string
	}{
		{name: "infinite recursion", src: `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, wantErr: "nested deeper"},
		{name: "mutual recursion", src: `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, wantErr: "nested deeper"},
		{name: "self application", src: `{% macro f(g) %}{{ g(g) }}{% endmacro %}{{ f(f) }}`, wantErr: "nested deeper"},
		{name: "exponential macro calls", src: `{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}`, wantErr: "exceeded"},
		{name: "nested loops", src: `{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}`, wantErr: "exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := mustParse(t, tt.src).Render(nil, Options{Timeout: -1, MaxSteps: 20_000})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got (%.40q, %v), want an error containing %q", out, err, tt.wantErr)
			}
		})
	}
}
