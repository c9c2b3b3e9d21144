package runner_test

import (
	"errors"
	"testing"

	"ubatch/batch"
	"ubatch/runner"
)

// TestOneDecodePath: the Runtime decodes only batches a KV manager scheduled, and a Session
// schedules a batch on its own manager and decodes it with the Runtime's Decode; a mistake on
// either side is an error, nothing changed, never a panic.
func TestOneDecodePath(t *testing.T) {
	s := loopContext(t, runner.Options{NCtx: 64})
	c := s.Runtime()
	var sched batch.KV
	for _, tc := range []struct {
		name    string
		decode  func(b *batch.Batch) error
		prepare func(b *batch.Batch) // run before decode
		want    error                // nil: success
		wantAny bool                 // any error
		used    int                  // the session's blocks in use after
	}{
		{name: "runtime refuses an unscheduled batch", decode: c.Decode, want: runner.ErrUnscheduled},
		{name: "session schedules and decodes", decode: s.Decode, used: 1},
		{name: "session refuses a scheduled batch", decode: s.Decode, wantAny: true, used: 1,
			prepare: func(b *batch.Batch) { b.KV = &sched }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b batch.Batch
			b.Add(1, 0, []int32{0}, true)
			if tc.prepare != nil {
				tc.prepare(&b)
			}
			err := tc.decode(&b)
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			case tc.wantAny && err == nil:
				t.Fatal("Decode succeeded, want an error")
			case tc.want == nil && !tc.wantAny && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.want == nil && !tc.wantAny && c.Logits(0) == nil:
				t.Fatal("no logits after a successful decode")
			}
			if used := s.KV().Stats().Used; used != tc.used {
				t.Errorf("session's manager: %d blocks in use, want %d", used, tc.used)
			}
		})
	}
}
