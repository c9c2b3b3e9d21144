package web

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"ubatch/engine"
)

// TestReasonsLegend: the page's legend (REASONS in app.js) explains exactly the budget reasons
// the engine gives a step.
func TestReasonsLegend(t *testing.T) {
	js, err := os.ReadFile("ui/app.js")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)const REASONS = \{(.*?)\n\};`).FindSubmatch(js)
	if block == nil {
		t.Fatal("no REASONS table in app.js")
	}
	var keys []string
	for _, m := range regexp.MustCompile(`(?m)^\s*([a-z_]+): "[^"]+",$`).FindAllSubmatch(block[1], -1) {
		keys = append(keys, string(m[1]))
	}
	tests := []struct {
		name   string
		reason engine.BudgetReason
	}{
		{"no decode", engine.BudgetNoDecode},
		{"fixed", engine.BudgetFixed},
		{"learning", engine.BudgetLearning},
		{"target", engine.BudgetTarget},
		{"queue", engine.BudgetQueue},
		{"floor", engine.BudgetFloor},
		{"batch size", engine.BudgetBatchSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !slices.Contains(keys, string(tc.reason)) {
				t.Errorf("the legend does not explain %q (it has %v)", tc.reason, keys)
			}
		})
	}
	if len(keys) != len(tests) {
		t.Errorf("the legend explains %v, the engine's reasons are %d", keys, len(tests))
	}
}
