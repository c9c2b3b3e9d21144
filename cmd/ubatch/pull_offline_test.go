package main

import (
	"strings"
	"testing"
)

// TestPullOffline: a pull that cannot reach the Hub says so and what to do, not to set HF_TOKEN.
func TestPullOffline(t *testing.T) {
	t.Setenv("UBATCH_HOME", t.TempDir())
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1") // nothing listens on port 1
	t.Setenv("HF_TOKEN", "")
	tests := []struct {
		name string
		args []string
	}{
		{name: "a repository", args: []string{"pull", "Org/Tiny-GGUF:Q8_0"}},
		{name: "a file", args: []string{"pull", "hf://Org/Tiny-GGUF/tiny-Q8_0.gguf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := ubatch(t, tc.args...)
			if code != 1 || !strings.Contains(errs, "cannot be reached: check the network") || strings.Contains(errs, "HF_TOKEN") {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 saying the Hub cannot be reached, without HF_TOKEN", code, errs)
			}
		})
	}
}
