package server

import (
	"net/http"

	"ubatch/chat"
)

// A Dialect registers one API dialect's routes on a model's Server (server/llamacpp's Routes):
// handlers that decode that API's bodies and word its answers over the core's requests,
// streams, limits and errors. New calls each of Config.Dialects once, after the core's routes;
// NewMulti calls them on a template Server that is never served, to learn a model's routes, so a
// Dialect registers routes and reads nothing of s at that time.
type Dialect func(s *Server)

// HandleFunc registers a dialect's route on s (pattern as http.ServeMux's); call it from a
// Dialect only.
func (s *Server) HandleFunc(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, h) }

// Config is the configuration s serves with, its defaults filled in by New.
func (s *Server) Config() Config { return s.cfg }

// BOSText is the text of the model's beginning-of-sequence token ("" when it has none).
func (s *Server) BOSText() string { return s.bosText }

// EOSText is the text of the model's end-of-sequence token ("" when it has none).
func (s *Server) EOSText() string { return s.eosText }

// Template is the chat template s renders conversations with (Config.ChatTemplate, the model's, or
// ChatML).
func (s *Server) Template() *chat.Template { return s.tmpl }
