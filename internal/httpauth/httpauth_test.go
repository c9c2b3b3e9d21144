package httpauth

import (
	"net/http/httptest"
	"testing"
)

func TestBearer(t *testing.T) {
	tests := []struct {
		name, header, want string
	}{
		{name: "none"},
		{name: "bearer", header: "Bearer abc", want: "abc"},
		{name: "scheme case", header: "bEARER abc", want: "abc"},
		{name: "spaces trimmed", header: "Bearer   abc  ", want: "abc"},
		{name: "empty token", header: "Bearer ", want: ""},
		{name: "basic", header: "Basic YWxhZGRpbg==", want: ""},
		{name: "no space", header: "Bearerabc", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if got := Bearer(r); got != tc.want {
				t.Errorf("Bearer(%q) = %q, want %q", tc.header, got, tc.want)
			}
		})
	}
}
