// Package all links every model family into a program: import it for its side effect,
//
//	import _ "ubatch/model/all"
//
// so that model.Open finds each family's loader.
package all

import (
	_ "ubatch/model/gemma"
	_ "ubatch/model/gemma4"
	_ "ubatch/model/gptoss"
	_ "ubatch/model/llama"
	_ "ubatch/model/phi3"
	_ "ubatch/model/qwen2"
	_ "ubatch/model/qwen3"
	_ "ubatch/model/qwen35"
	_ "ubatch/model/qwen3moe"
)
