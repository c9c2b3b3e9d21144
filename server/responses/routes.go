// Package responses is OpenAI's Responses API over the server core: POST /v1/responses (and
// /responses), GET and DELETE /v1/responses/{id}. A request is read onto a chat request
// (server.ChatRequest), so it runs through the core's template, constraints and tool-call
// parsing; its reply words the generation as response objects and named stream events, and
// finished responses are kept in memory for previous_response_id (store.go).
package responses

import "ubatch/server"

// Routes registers the Responses API's routes on s, also without /v1 as llama-server accepts
// them: a server.Dialect (Config.Dialects). Each Server keeps its own stored responses.
func Routes(s *server.Server) {
	a := &api{Server: s}
	for _, prefix := range []string{"/v1", ""} {
		s.HandleFunc("POST "+prefix+"/responses", a.handleResponses)
		s.HandleFunc("GET "+prefix+"/responses/{id}", a.handleGetResponse)
		s.HandleFunc("DELETE "+prefix+"/responses/{id}", a.handleDeleteResponse)
	}
}

// api is the core Server as the Responses API's handlers use it, with its store.
type api struct {
	*server.Server
	responses responseStore // finished responses, for previous_response_id
}
