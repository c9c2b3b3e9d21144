// Package httpauth reads the credentials of an HTTP request, for the nodes and the router alike.
package httpauth

import (
	"net/http"
	"strings"
)

// Bearer is the token of r's "Authorization: Bearer TOKEN" header (the scheme's case ignored,
// surrounding spaces trimmed), or "" when it has none.
func Bearer(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(auth[len(prefix):])
}
