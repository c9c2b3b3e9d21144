package server

import "ubatch/gguf"

// DescribeWeights is a model's parameter count as Ollama writes it ("260.0K", "7.6B") and its
// quantization level (the type of most weight bytes, "Q4_K"), from the GGUF's tensor table:
// what /api/tags reports, for `ubatch show`, which reads the file without a server.
func DescribeWeights(tensors []gguf.TensorInfo) (paramSize, quantLevel string) {
	return ollamaWeights(tensors)
}
