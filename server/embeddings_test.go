package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/runner"
)

type embeddingRef struct {
	Prompt    string    `json:"prompt"`
	Pooling   string    `json:"pooling"`
	Embedding []float32 `json:"embedding"`
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestEmbeddingsEndpoint: /v1/embeddings returns llama-embedding's vectors (cosine >= 0.999) for
// both poolings, as floats and as base64, one item per input in order.
func TestEmbeddingsEndpoint(t *testing.T) {
	var ref struct{ Items []embeddingRef }
	if err := json.Unmarshal(testdata.ReadFile(t, "reference/stories260K.embeddings.json"), &ref); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []runner.Pooling{runner.PoolMean, runner.PoolLast} {
		t.Run(string(pool), func(t *testing.T) {
			e := newEnv(t, envOptions{embedder: pool})
			var want []embeddingRef
			var inputs []string
			for _, it := range ref.Items {
				if it.Pooling == string(pool) {
					want = append(want, it)
					inputs = append(inputs, it.Prompt)
				}
			}
			for _, format := range []string{"float", "base64"} {
				var body struct {
					Object string `json:"object"`
					Data   []struct {
						Index     int             `json:"index"`
						Embedding json.RawMessage `json:"embedding"`
					} `json:"data"`
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
					} `json:"usage"`
				}
				e.postJSON("/v1/embeddings", map[string]any{"input": inputs, "model": "stories", "encoding_format": format}, http.StatusOK, &body)
				if body.Object != "list" || len(body.Data) != len(want) || body.Usage.PromptTokens == 0 {
					t.Fatalf("%s: response %+v", format, body)
				}
				for i, d := range body.Data {
					var vec []float32
					if format == "float" {
						if err := json.Unmarshal(d.Embedding, &vec); err != nil {
							t.Fatal(err)
						}
					} else {
						var s string
						json.Unmarshal(d.Embedding, &s)
						raw, err := base64.StdEncoding.DecodeString(s)
						if err != nil {
							t.Fatal(err)
						}
						for j := 0; j+4 <= len(raw); j += 4 {
							vec = append(vec, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
						}
					}
					if c := cosine(vec, want[i].Embedding); d.Index != i || len(vec) != len(want[i].Embedding) || c < 0.999 {
						t.Errorf("%s item %d (index %d): cosine %.5f, len %d", format, i, d.Index, c, len(vec))
					}
				}
			}
		})
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	e := newEnv(t, envOptions{embedder: runner.PoolMean})
	long := strings.Repeat("Once upon a time ", 100)
	for _, tc := range []struct {
		name, body, param string
		status            int
	}{
		{"no input", `{"model":"m"}`, "input", 400},
		{"bad format", `{"input":"hi","encoding_format":"int8"}`, "encoding_format", 400},
		{"dimensions", `{"input":"hi","dimensions":7}`, "dimensions", 400},
		{"token outside vocabulary", `{"input":[1,99999]}`, "input", 400},
		{"too long", `{"input":"` + long + `"}`, "input", 400},
		{"malformed", `{"input":`, "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.post(context.Background(), "/v1/embeddings", tc.body)
			defer resp.Body.Close()
			d := checkError(t, resp, tc.status, "invalid_request_error")
			got := ""
			if d.Param != nil {
				got = *d.Param
			}
			if got != tc.param {
				t.Errorf("param %q, want %q (%s)", got, tc.param, d.Message)
			}
		})
	}
	off := newEnv(t, envOptions{})
	resp := off.post(context.Background(), "/v1/embeddings", `{"input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("embeddings off: status %d, want 404", resp.StatusCode)
	}
}
