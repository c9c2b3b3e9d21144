package server

import (
	"context"
	"net/http"
	"strings"
	"unicode/utf8"

	"ubatch/internal/httpauth"
	"ubatch/kvcache"
	"ubatch/prefixhash"
)

// Cache salts (vLLM's cache_salt). usage.prompt_tokens_details.cached_tokens, and the time to
// first token, tell a client how much of its prompt someone sent before. A request's
// cache_salt puts its prompt's blocks in a namespace of their own (kvcache.Salt): only requests
// with the same salt share them, in RAM, on disk and between peers. Config.CacheSaltPerKey adds
// the client's bearer token (hashed) to every request's salt, so that tenants of one server
// never share a block whatever they send; requests without a token share the unsalted space.

// maxCacheSalt bounds cache_salt: a namespace name, not a payload.
const maxCacheSalt = 256

// CheckCacheSalt validates the cache_salt field: absent or a string of 1 to maxCacheSalt bytes
// of UTF-8 without NUL (the separator of the tenant's part).
func CheckCacheSalt(v *string) (string, error) {
	switch {
	case v == nil:
		return "", nil
	case *v == "":
		return "", BadRequest("cache_salt", "cache_salt is empty: omit it to share the cache with unsalted requests, or give a non-empty string")
	case len(*v) > maxCacheSalt:
		return "", BadRequest("cache_salt", "cache_salt is %d bytes long: use at most %d", len(*v), maxCacheSalt)
	case !utf8.ValidString(*v) || strings.ContainsRune(*v, 0):
		return "", BadRequest("cache_salt", "cache_salt must be valid UTF-8 without NUL characters")
	}
	return *v, nil
}

// tenantKey is the context key of the request's bearer token (withTenantSalt).
type tenantKey struct{}

// withTenantSalt puts r's bearer token, if any, in its context as the tenant part of every
// salt it uses (Config.CacheSaltPerKey).
func withTenantSalt(r *http.Request) *http.Request {
	tok := httpauth.Bearer(r)
	if tok == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), tenantKey{}, tok))
}

// requestSalt is the kvcache.Salt of a request with cache_salt salt (may be "") in ctx: the
// tenant's part (withTenantSalt) and the request's (prefixhash.TenantSalt).
func requestSalt(ctx context.Context, salt string) kvcache.Salt {
	tok, _ := ctx.Value(tenantKey{}).(string)
	return kvcache.NewSalt(prefixhash.TenantSalt(tok, salt))
}
