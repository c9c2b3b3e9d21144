package main

import "testing"

// TestShiftKeep: --keep counts prompt tokens besides BOS, as llama-server's n_keep does.
func TestShiftKeep(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		addBOS bool
		want   int
	}{
		{name: "default with BOS", n: 0, addBOS: true, want: 1},
		{name: "default without BOS", n: 0, addBOS: false, want: 0},
		{name: "n with BOS", n: 10, addBOS: true, want: 11},
		{name: "n without BOS", n: 10, addBOS: false, want: 10},
		{name: "whole prompt", n: -1, addBOS: true, want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shiftKeep(tc.n, tc.addBOS); got != tc.want {
				t.Fatalf("shiftKeep(%d, %v) = %d, want %d", tc.n, tc.addBOS, got, tc.want)
			}
		})
	}
}
