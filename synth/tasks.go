package synth

import (
	"fmt"

	"ubatch/gguf"
	"ubatch/tokenizer"
)

// FIMTokens are the fill-in-the-middle tokens BuiltinVocabFIM ends with, Qwen 2.5 Coder's set:
// prefix, suffix, middle, pad, repository name, file separator.
var FIMTokens = []string{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}

// BuiltinVocabFIM is BuiltinVocab(size) whose last len(FIMTokens) tokens are FIMTokens, as
// control tokens, so that a model of it serves /infill once Options.FIM writes their keys.
func BuiltinVocabFIM(size int) (*gguf.File, error) {
	return builtinVocab(size, FIMTokens)
}

// RerankTemplate is the prompt llama.cpp's converter stores as tokenizer.chat_template.rerank for
// Qwen 3 rerankers; llama-server fills {query} and {document} in.
const RerankTemplate = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. " +
	"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant " +
	"passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

// RerankLabels are the classes of a synthesised reranker's head, as in a converted Qwen 3
// reranker: its score is the first class's.
var RerankLabels = []string{"yes", "no"}

// setFIM writes the tokenizer.ggml.fim_*_token_id keys of the FIM tokens the vocabulary has,
// found as the tokenizer finds them (by their texts); a vocabulary without prefix, suffix and
// middle tokens is an error.
func setFIM(vocab *gguf.File, set func(string, any)) error {
	tk, err := tokenizer.FromGGUF(vocab)
	if err != nil {
		return fmt.Errorf("fim: %w", err)
	}
	f := tk.FIM()
	if !f.HasInfill() {
		return fmt.Errorf("fim: the vocabulary has no fill-in-the-middle tokens (%v or llama.cpp's other names): use BuiltinVocabFIM (--vocab builtin)", FIMTokens[:3])
	}
	for _, k := range []struct {
		key string
		id  int32
	}{{"pre", f.Pre}, {"suf", f.Suf}, {"mid", f.Mid}, {"pad", f.Pad}, {"rep", f.Rep}, {"sep", f.Sep}} {
		if k.id >= 0 {
			set("tokenizer.ggml.fim_"+k.key+"_token_id", uint32(k.id))
		}
	}
	return nil
}

// setRerank writes a reranker's metadata as llama.cpp's Qwen 3 converter does: pooling type
// rank (4), the classifier's labels and the rerank prompt template. Its head,
// cls.output.weight, is among the layout's tensors.
func (l *layout) setRerank(set func(string, any)) {
	set(l.GGUF+".pooling_type", uint32(4))
	set(l.GGUF+".classifier.output_labels", RerankLabels)
	set("tokenizer.chat_template.rerank", RerankTemplate)
}

// TaskFixture is Fixture with the vocabulary's FIM tokens and keys (fim: BuiltinVocabFIM) and a
// reranker's head and metadata (rerank), for tests of /infill and /v1/rerank.
func TaskFixture(arch, fileType string, fim, rerank bool) (*gguf.Writer, error) {
	v, err := builtinVocab(320, nil)
	if fim {
		v, err = BuiltinVocabFIM(320)
	}
	if err != nil {
		return nil, err
	}
	return Build(Options{Arch: arch, Shape: mustShape("mini"), FileType: fileType, Vocab: v, Seed: 1, Threads: 1, FIM: fim, Rerank: rerank})
}
