package server

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"ubatch/server/web"
)

// guarded serves e's engine from a server that listens, as far as its Host check knows, on
// listen and also answers allowed: the real handler of `ubatch serve --host ... --allowed-hosts`.
func (e *testEnv) guarded(t *testing.T, listen string, allowed ...string) *Server {
	t.Helper()
	cfg := e.srv.cfg
	cfg.ListenAddr, cfg.AllowedHosts = listen, allowed
	cfg.Dialects = testDialects
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// guardedServer is guarded behind an httptest server on 127.0.0.1, for clients such as Chromium.
func (e *testEnv) guardedServer(t *testing.T, allowed ...string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(e.guarded(t, "127.0.0.1:0", allowed...).Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestSecurityHeaders: every response says nosniff, the API's errors and preflights too, and the
// page and its assets (their 404 too) carry the page's CSP, X-Frame-Options and Referrer-Policy.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, envOptions{apiKey: "sekrit", live: true})
	srv := e.guarded(t, "127.0.0.1:8080")
	tests := []struct {
		name, method, path, host, origin string
		key                              bool
		status                           int
		page                             bool // whether the page's headers are expected
	}{
		{name: "page", path: "/", status: 200, page: true},
		{name: "page with query", path: "/?q=hi", status: 200, page: true},
		{name: "script", path: "/ui/app.js", status: 200, page: true},
		{name: "style", path: "/ui/style.css", status: 200, page: true},
		{name: "missing asset", path: "/ui/nope.js", status: 404, page: true},
		{name: "API", path: "/v1/models", key: true, status: 200},
		{name: "API without the key", path: "/v1/models", status: 401},
		{name: "health", path: "/health", status: 200},
		{name: "no route", path: "/v1/nope", key: true, status: 404},
		{name: "wrong method", method: http.MethodDelete, path: "/v1/models", key: true, status: 405},
		{name: "preflight", method: http.MethodOptions, path: "/v1/models", origin: "http://localhost:3000", status: 204},
		{name: "refused preflight", method: http.MethodOptions, path: "/v1/models", origin: "https://evil.example", status: 403},
		{name: "refused Host", path: "/", host: "evil.example", status: 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(cmp.Or(tc.method, http.MethodGet), tc.path, nil)
			req.Host = cmp.Or(tc.host, "127.0.0.1:8080")
			if tc.key {
				req.Header.Set("Authorization", "Bearer sekrit")
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
				req.Header.Set("Access-Control-Request-Method", "POST")
			}
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			hd := rec.Result().Header
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if got := hd.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", got)
			}
			want := map[string]string{"Content-Security-Policy": web.CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
			for k, v := range want {
				if got := hd.Get(k); tc.page && got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestWebCSP: the page's policy allows nothing inline and nothing from elsewhere, and forbids
// framing; the browser test checks that the page works under it.
func TestWebCSP(t *testing.T) {
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
		if !strings.Contains(web.CSP+";", directive+";") {
			t.Errorf("CSP %q lacks %q", web.CSP, directive)
		}
	}
	for _, weak := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:"} {
		if strings.Contains(web.CSP, weak) {
			t.Errorf("CSP %q allows %s", web.CSP, weak)
		}
	}
}

// TestHostCheck: a server on a loopback address answers loopback Host names only, unless
// --allowed-hosts names the host; a server exposed on another address answers any Host unless
// --allowed-hosts restricts it.
func TestHostCheck(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name, listen string
		allowed      []string
		method, host string
		status       int
	}{
		{name: "localhost", listen: "127.0.0.1:8080", host: "localhost:8080", status: 200},
		{name: "localhost without port", listen: "127.0.0.1:8080", host: "localhost", status: 200},
		{name: "localhost upper case, final dot", listen: "127.0.0.1:8080", host: "LocalHost.:8080", status: 200},
		{name: "a .localhost name", listen: "127.0.0.1:8080", host: "app.localhost:3000", status: 200},
		{name: "127.0.0.1", listen: "127.0.0.1:8080", host: "127.0.0.1:8080", status: 200},
		{name: "elsewhere in 127/8", listen: "127.0.0.1:8080", host: "127.1.2.3", status: 200},
		{name: "::1", listen: "127.0.0.1:8080", host: "[::1]:8080", status: 200},
		{name: "::1 without port", listen: "127.0.0.1:8080", host: "[::1]", status: 200},
		{name: "IPv4-mapped loopback", listen: "127.0.0.1:8080", host: "[::ffff:127.0.0.1]:8080", status: 200},
		{name: "no Host (HTTP/1.0)", listen: "127.0.0.1:8080", host: "", status: 200},
		{name: "foreign name", listen: "127.0.0.1:8080", host: "evil.example", status: 403},
		{name: "foreign name with port", listen: "127.0.0.1:8080", host: "evil.example:8080", status: 403},
		{name: "foreign preflight", listen: "127.0.0.1:8080", method: http.MethodOptions, host: "evil.example:8080", status: 403},
		{name: "name that starts like localhost", listen: "127.0.0.1:8080", host: "localhost.evil.example", status: 403},
		{name: "name that starts like 127.0.0.1", listen: "127.0.0.1:8080", host: "127.0.0.1.evil.example", status: 403},
		{name: "a LAN address", listen: "127.0.0.1:8080", host: "192.168.1.5:8080", status: 403},
		{name: "0.0.0.0", listen: "127.0.0.1:8080", host: "0.0.0.0:8080", status: 403},
		{name: "listening on localhost", listen: "localhost:8080", host: "evil.example", status: 403},
		{name: "listening on ::1", listen: "[::1]:8080", host: "evil.example", status: 403},
		{name: "listening on another loopback address", listen: "127.0.0.2:8080", host: "evil.example", status: 403},
		{name: "allowed host", listen: "127.0.0.1:8080", allowed: []string{"evil.example"}, host: "evil.example:8080", status: 200},
		{name: "allowed host, any case and port", listen: "127.0.0.1:8080", allowed: []string{"Evil.Example:443"}, host: "EVIL.example:9", status: 200},
		{name: "another host than the allowed one", listen: "127.0.0.1:8080", allowed: []string{"evil.example"}, host: "other.example", status: 403},
		{name: "loopback names beside the allowed ones", listen: "127.0.0.1:8080", allowed: []string{"evil.example"}, host: "localhost", status: 200},
		{name: "any host allowed", listen: "127.0.0.1:8080", allowed: []string{"*"}, host: "evil.example", status: 200},
		{name: "every interface", listen: "0.0.0.0:8080", host: "evil.example", status: 200},
		{name: "every interface, no host", listen: ":8080", host: "evil.example", status: 200},
		{name: "a LAN bind", listen: "192.168.1.5:8080", host: "evil.example", status: 200},
		{name: "unknown listen address", listen: "", host: "evil.example", status: 200},
		{name: "every interface, allowed hosts restrict", listen: "0.0.0.0:8080", allowed: []string{"api.example"}, host: "evil.example", status: 403},
		{name: "every interface, an allowed host", listen: "0.0.0.0:8080", allowed: []string{"api.example"}, host: "api.example", status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := e.guarded(t, tc.listen, tc.allowed...)
			req := httptest.NewRequest(cmp.Or(tc.method, http.MethodGet), "/v1/models", nil)
			req.Host = tc.host
			req.Header.Set("Origin", "http://localhost:3000")
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			want := tc.status
			if tc.method == http.MethodOptions && want == 200 {
				want = 204
			}
			if rec.Code != want {
				t.Fatalf("Host %q: status %d, want %d: %s", tc.host, rec.Code, want, rec.Body)
			}
			if want != http.StatusForbidden {
				return
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code == nil || *body.Error.Code != "host_not_allowed" {
				t.Fatalf("403 body %s (%v), want OpenAI's error shape with code host_not_allowed", rec.Body, err)
			}
			if name := hostName(tc.host); !strings.Contains(body.Error.Message, "--allowed-hosts "+name) {
				t.Errorf("message %q does not say that --allowed-hosts %s allows it", body.Error.Message, name)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestHostCheckConfig: an allowed host that is a URL or a pattern is refused when the server is
// built.
func TestHostCheckConfig(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		ok      bool
	}{
		{name: "names", allowed: []string{"a.example", "b.example:8080", "[::2]"}, ok: true},
		{name: "empty entries", allowed: []string{"", " "}, ok: true},
		{name: "a URL", allowed: []string{"https://a.example"}},
		{name: "a path", allowed: []string{"a.example/v1"}},
		{name: "a wildcard", allowed: []string{"*.a.example"}},
		{name: "any", allowed: []string{"a.example", "*"}, ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newHostGuard("127.0.0.1:8080", tc.allowed); (err == nil) != tc.ok {
				t.Errorf("newHostGuard(%q): %v, want ok %v", tc.allowed, err, tc.ok)
			}
		})
	}
}

// sdkHeaders are the request headers a browser preflights for the official OpenAI SDK (as
// Chromium lists them: lower case, sorted).
const sdkHeaders = "authorization,content-type,openai-beta,openai-organization,openai-project,x-stainless-arch," +
	"x-stainless-lang,x-stainless-os,x-stainless-package-version,x-stainless-retry-count,x-stainless-runtime," +
	"x-stainless-runtime-version,x-stainless-timeout"

// TestCORSPreflightHeaders: a preflight allows the SDKs' headers, X-Stainless-* by prefix, and
// leaves out any other.
func TestCORSPreflightHeaders(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name      string
		requested []string // Access-Control-Request-Headers lines
		want      string   // Access-Control-Allow-Headers
	}{
		{name: "the OpenAI SDK", requested: []string{sdkHeaders}, want: strings.ReplaceAll(sdkHeaders, ",", ", ")},
		{name: "any case and spacing", requested: []string{"X-Stainless-Lang ,  Content-Type"}, want: "x-stainless-lang, content-type"},
		{name: "a future Stainless header", requested: []string{"x-stainless-helper-method"}, want: "x-stainless-helper-method"},
		{name: "other headers are left out", requested: []string{"x-evil, authorization, x-stainless"}, want: "authorization"},
		{name: "several lines, repeats once", requested: []string{"authorization", "Authorization, openai-project"}, want: "authorization, openai-project"},
		{name: "none requested", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodOptions, e.URL+"/v1/chat/completions", nil)
			req.Header.Set("Origin", "http://localhost:5173")
			req.Header.Set("Access-Control-Request-Method", "POST")
			for _, v := range tc.requested {
				req.Header.Add("Access-Control-Request-Headers", v)
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("status %d, want 204", resp.StatusCode)
			}
			if got := resp.Header.Get("Access-Control-Allow-Headers"); got != tc.want {
				t.Errorf("Access-Control-Allow-Headers %q, want %q", got, tc.want)
			}
			if got := resp.Header.Values("Vary"); !strings.Contains(strings.Join(got, ","), "Access-Control-Request-Headers") {
				t.Errorf("Vary %q lacks Access-Control-Request-Headers", got)
			}
		})
	}
}
