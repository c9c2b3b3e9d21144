package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHostCheckWrapper checks HostCheck, the node's Host check around another handler (the
// router's).
func TestHostCheckWrapper(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("inner")) })
	tests := []struct {
		name, listen, host string
		allowed            []string
		status             int
	}{
		{name: "localhost on loopback", listen: "127.0.0.1:8000", host: "localhost:8000", status: 200},
		{name: "foreign Host on loopback", listen: "127.0.0.1:8000", host: "evil.example", status: 403},
		{name: "allowed foreign Host", listen: "127.0.0.1:8000", host: "evil.example", allowed: []string{"evil.example"}, status: 200},
		{name: "every interface", listen: "0.0.0.0:8000", host: "evil.example", status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := HostCheck(inner, tc.listen, tc.allowed)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/health", nil)
			req.Host = tc.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Fatal("no X-Content-Type-Options: nosniff")
			}
		})
	}
	if _, err := HostCheck(inner, "127.0.0.1:8000", []string{"http://evil.example/"}); err == nil {
		t.Fatal("a URL among the allowed hosts was accepted")
	}
}
