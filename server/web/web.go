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

// Page serves index.html (the server routes it at exactly "/").
func Page() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, ui, "index.html")
	})
}

// Assets serves the page's files under /ui/ (/ui/app.js, /ui/style.css, ...).
func Assets() http.Handler {
	return http.StripPrefix("/ui/", http.FileServerFS(ui))
}
