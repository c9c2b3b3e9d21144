package chat

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStrftime(t *testing.T) {
	noon := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	early := time.Date(2026, 3, 5, 0, 7, 9, 123456000, time.UTC)
	// Expected values are Python's datetime.strftime output on Linux.
	tests := []struct {
		name   string
		t      time.Time
		format string
		want   string
	}{
		{name: "iso date", t: noon, format: "%Y-%m-%d", want: "2026-11-30"},
		{name: "llama 3 style", t: noon, format: "%d %b %Y", want: "30 Nov 2026"},
		{name: "long month", t: noon, format: "%B %d, %Y", want: "November 30, 2026"},
		{name: "assorted", t: noon, format: "%a %A %w %j %y %I %p %H:%M:%S %f", want: "Mon Monday 1 334 26 12 PM 12:00:00 000000"},
		{name: "composites and literals", t: noon, format: "%-d/%-m %e|%c|%x|%X|%F %T|%%|%Q|%", want: "30/11 30|Mon Nov 30 12:00:00 2026|11/30/26|12:00:00|2026-11-30 12:00:00|%|%Q|%"},
		{name: "padding flags", t: early, format: "%-d %e %I %p %j %-j %-H %f", want: "5  5 12 AM 064 64 0 123456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strftime(tt.t, tt.format); got != tt.want {
				t.Errorf("strftime(%q) = %q, want %q", tt.format, got, tt.want)
			}
		})
	}
}

func TestStrftimeNowUsesInjectedClock(t *testing.T) {
	tmpl, err := Parse(`{{ strftime_now("%d %b %Y") }}`)
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Date(2024, 7, 26, 9, 0, 0, 0, time.UTC) }
	got, err := tmpl.Render(nil, Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if got != "26 Jul 2024" {
		t.Errorf("got %q, want %q", got, "26 Jul 2024")
	}
	if _, err := mustParse(t, `{{ strftime_now() }}`).Render(nil, Options{Now: clock}); err == nil {
		t.Error("strftime_now() without a format rendered without error")
	}
}

func TestRange(t *testing.T) {
	tests := []struct {
		name, expr, want string
		wantErr          bool
	}{
		{name: "stop", expr: `range(4) | join(",")`, want: "0,1,2,3"},
		{name: "start stop", expr: `range(2, 5) | join(",")`, want: "2,3,4"},
		{name: "step", expr: `range(1, 10, 3) | join(",")`, want: "1,4,7"},
		{name: "negative step", expr: `range(5, 0, -2) | join(",")`, want: "5,3,1"},
		{name: "empty", expr: `range(3, 1) | length`, want: "0"},
		{name: "at the sandbox limit", expr: `range(100000) | length`, want: "100000"},
		{name: "over the sandbox limit", expr: `range(100001)`, wantErr: true},
		{name: "huge bounds", expr: `range(-9223372036854775807, 9223372036854775807)`, wantErr: true},
		{name: "zero step", expr: `range(1, 2, 0)`, wantErr: true},
		{name: "string argument", expr: `range("3")`, wantErr: true},
		{name: "no arguments", expr: `range()`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustParse(t, "{{ "+tt.expr+" }}").Render(nil, Options{})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("rendered %.40q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRaiseException(t *testing.T) {
	tests := []struct {
		name, src, wantMsg string
	}{
		{name: "message", src: `{{ raise_exception("Conversation roles must alternate") }}`, wantMsg: "Conversation roles must alternate"},
		{name: "inside a loop", src: `{% for m in messages %}{% if m.role == "system" %}{{ raise_exception("System role not supported") }}{% endif %}{% endfor %}`, wantMsg: "System role not supported"},
		{name: "no message", src: `{{ raise_exception() }}`, wantMsg: "raise_exception called without a message"},
	}
	msgs := []map[string]any{{"role": "system", "content": "x"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := mustParse(t, tt.src).Render(msgs, Options{})
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("got (%q, %v), want a *TemplateError", out, err)
			}
			if te.Message != tt.wantMsg {
				t.Errorf("message %q, want %q", te.Message, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error text %q lacks the message", err.Error())
			}
		})
	}
}

func mustParse(t *testing.T, src string) *Template {
	t.Helper()
	tmpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return tmpl
}
