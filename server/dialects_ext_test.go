package server_test

import (
	"ubatch/server"
	"ubatch/server/llamacpp"
	"ubatch/server/ollama"
	"ubatch/server/openai"
	"ubatch/server/responses"
)

// The core's tests run their servers with every dialect (server.testDialects).
func init() { server.SetTestDialects(llamacpp.Routes, ollama.Routes, openai.Routes, responses.Routes) }
