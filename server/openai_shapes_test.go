package server

// What the core's tests read of server/openai's answers (its types are its own): the shapes of
// OpenAI's API, decoded as a client does.

// completionChoice is a /v1/completions stream chunk's choice.
type completionChoice struct {
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

// chatDelta is a chat stream chunk's delta; a tool call's delta has the shape of a whole call,
// its index always set.
type chatDelta struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent *string        `json:"reasoning_content"`
	ToolCalls        []ToolCallJSON `json:"tool_calls"`
}

type chatLogprobs struct {
	Content []struct {
		chatTopLogprob
		TopLogprobs []chatTopLogprob `json:"top_logprobs"`
	} `json:"content"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type embeddingsResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}
