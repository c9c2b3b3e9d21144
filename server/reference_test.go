package server

import (
	"encoding/json"
	"testing"

	"ubatch/internal/testdata"
)

// referenceGreedy returns llama.cpp's greedy continuation of "Once upon a time" for stories260K.
func referenceGreedy(t *testing.T) (prompt, text string) {
	t.Helper()
	r := testdata.ReadReference(t, "stories260K")
	return r.Prompt, r.GreedyText
}

func TestModels(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, err := e.Client.Get(e.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "stories" || list.Data[0].OwnedBy != "ubatch" || list.Data[0].Object != "model" {
		t.Fatalf("models %+v", list)
	}
}
