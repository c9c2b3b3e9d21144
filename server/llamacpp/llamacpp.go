// Package llamacpp is llama-server's API over the server core: POST /completion and /infill
// (llama.cpp's completion objects and timings), /tokenize (llama.cpp's and vLLM's bodies),
// /detokenize, /apply-template, GET /props and /slots, and POST /slots/{id}'s save, restore and
// erase. Its handlers decode, then hand the generation to the core (server.Server.ServeCompletion)
// and word its events; limits, errors and the engine are the core's.
package llamacpp

import "ubatch/server"

// Routes registers llama.cpp's routes on s: a server.Dialect (Config.Dialects).
func Routes(s *server.Server) {
	a := &api{s}
	s.HandleFunc("POST /completion", a.handleLlamaCompletion)
	s.HandleFunc("POST /infill", a.handleInfill)
	s.HandleFunc("POST /tokenize", a.handleTokenize)
	s.HandleFunc("POST /detokenize", a.handleDetokenize)
	s.HandleFunc("POST /apply-template", a.handleApplyTemplate)
	s.HandleFunc("GET /props", a.handleProps)
	s.HandleFunc("GET /slots", a.handleSlots)
	s.HandleFunc("POST /slots/{id}", a.handleSlotAction)
}

// api is the core Server as llama.cpp's handlers use it.
type api struct{ *server.Server }
