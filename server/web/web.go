// Package web is the server's built-in web page: a chat playground and a live view of the
// continuous batching, plain HTML, CSS and JavaScript embedded in the binary (no build step, no
// network beyond the server itself).
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed ui
var files embed.FS

// ui is the embedded ui directory: index.html and its assets.
var ui, _ = fs.Sub(files, "ui")

// CSP is the page's Content-Security-Policy. The page runs only its own script file (no inline
// script, no eval), styles only from its style sheet (it sets sizes through the CSSOM, which
// style-src does not govern), talks only to its own server, and no other site may frame it: a
// framing page could otherwise click its buttons with the API key the page keeps.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// secured sets the page's security headers on every response of h, errors included.
func secured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Frame-Options", "DENY")        // frame-ancestors for browsers that predate it
		hd.Set("Referrer-Policy", "no-referrer") // links out of a chat reply do not tell where they came from
		hd.Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// Page serves index.html (the server routes it at exactly "/").
func Page() http.Handler {
	return secured(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, ui, "index.html")
	}))
}

// Assets serves the page's files under /ui/ (/ui/app.js, /ui/style.css, ...).
func Assets() http.Handler {
	return secured(http.StripPrefix("/ui/", http.FileServerFS(ui)))
}
