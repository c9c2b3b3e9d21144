package testkit

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheckText(t *testing.T) {
	tests := []struct {
		name          string
		got           string
		want, notWant []string
		errs          int
	}{
		{name: "all there", got: "one two three", want: []string{"one", "three"}, notWant: []string{"four"}},
		{name: "one missing", got: "one two", want: []string{"one", "three"}, errs: 1},
		{name: "one unwanted", got: "one two", notWant: []string{"two", "five"}, errs: 1},
		{name: "both", got: "", want: []string{"x"}, notWant: []string{""}, errs: 2},
		{name: "nothing asked", got: "anything"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckText(r, "output", tc.got, tc.want, tc.notWant)
			if len(r.errs) != tc.errs {
				t.Errorf("%d errors %q, want %d", len(r.errs), r.errs, tc.errs)
			}
		})
	}
}
