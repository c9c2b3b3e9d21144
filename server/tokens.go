package server

import (
	"encoding/json"
	"math"
)

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// OpenAIFields are the request fields OpenAI's completions and chat completions share; the
// core's ChatRequest has them, so the Ollama and Responses dialects' chats set them too.
type OpenAIFields struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	Logprobs            json.RawMessage `json:"logprobs"`
	User                string          `json:"user"`
}

// RawJSON is JSON text embedded as is.
type RawJSON string

func (r RawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// PromptTokens tokenizes a text prompt as llama.cpp's server does (special tokens added as the
// model asks, special-token text parsed) or checks a token-id prompt against the vocabulary.
func (s *Server) PromptTokens(field string, in PromptInput) ([]int32, error) {
	v := s.cfg.Model.Vocab
	if in.isText {
		if in.text == "" {
			return nil, BadRequest(field, "%s is empty", field)
		}
		return s.Encode(field, in.text, true, true)
	}
	if len(in.tokens) == 0 {
		return nil, BadRequest(field, "%s is an empty list of tokens", field)
	}
	for _, t := range in.tokens {
		if t < 0 || int(t) >= v.VocabSize() {
			return nil, BadRequest(field, "token id %d is outside the vocabulary [0, %d)", t, v.VocabSize())
		}
	}
	return in.tokens, nil
}

// PieceText is the text of one token as logprobs report it (a byte token that is part of a
// multi-byte character is not valid UTF-8 alone; JSON encoding then shows U+FFFD, while the chat
// API's bytes field keeps the exact bytes).
func (s *Server) PieceText(id int32) string { return string(s.cfg.Model.Vocab.Piece(id)) }

// PieceBytes is a token's text as a list of byte values (JSON would turn a []byte into base64).
func (s *Server) PieceBytes(id int32) []int {
	p := s.cfg.Model.Vocab.Piece(id)
	out := make([]int, len(p))
	for i, b := range p {
		out[i] = int(b)
	}
	return out
}

// FiniteLogprob maps -Inf (a token the sampler could never pick) to OpenAI's -9999, since JSON has
// no infinities.
func FiniteLogprob(v float32) float64 {
	if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
		return -9999
	}
	return float64(v)
}
