package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// chatServer answers /v1/chat/completions streams with the reply "reply N" (N counting its
// requests) and records each request's messages.
type chatServer struct {
	mu   sync.Mutex
	n    int
	seen [][]chatMessage
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "wrong path "+r.URL.Path, http.StatusNotFound)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.n++
	reply := fmt.Sprintf("reply %d", s.n)
	s.seen = append(s.seen, req.Messages)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, part := range []string{reply[:3], reply[3:]} {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", part)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n",
		10*len(req.Messages), 10*(len(req.Messages)-2))
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestChatWorkload: every turn of a synthesized conversation resends the conversation so far,
// the server's replies included, and turns 2+ are summarized apart.
func TestChatWorkload(t *testing.T) {
	tests := []struct {
		name          string
		requests      int
		clients       int
		wantFollowUps int
	}{
		{name: "two conversations, one client", requests: 8, clients: 1, wantFollowUps: 6},
		{name: "three conversations, the last cut short", requests: 10, clients: 3, wantFollowUps: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := Synthesize(WorkloadChat, tc.requests, 1)
			if err != nil {
				t.Fatal(err)
			}
			srv := &chatServer{}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			res, err := Run(context.Background(), Config{URL: ts.URL, Clients: tc.clients}, reqs)
			if err != nil || res.Errors != 0 || res.Requests != tc.requests {
				t.Fatalf("run: %v, %+v", err, res)
			}
			if res.TTFTFollowUp.N != tc.wantFollowUps {
				t.Fatalf("%d follow-up TTFTs, want %d", res.TTFTFollowUp.N, tc.wantFollowUps)
			}
			// Each turn's messages: system, then user and assistant in turn, ending with the
			// user's; every assistant message is a reply the server gave to the turn before.
			replies := map[string]bool{}
			for i := range srv.n {
				replies[fmt.Sprintf("reply %d", i+1)] = true
			}
			byFirst := map[string][][]chatMessage{}
			for _, msgs := range srv.seen {
				if len(msgs)%2 != 0 || msgs[0].Role != "system" {
					t.Fatalf("messages %+v", msgs)
				}
				for j, m := range msgs[1:] {
					want := "user"
					if j%2 == 1 {
						want = "assistant"
						if !replies[m.Content] {
							t.Fatalf("assistant message %q is no reply of the server", m.Content)
						}
					}
					if m.Role != want {
						t.Fatalf("message %d is %s, want %s: %+v", j+1, m.Role, want, msgs)
					}
				}
				byFirst[msgs[0].Content] = append(byFirst[msgs[0].Content], msgs)
			}
			for sys, turns := range byFirst {
				slices.SortFunc(turns, func(a, b []chatMessage) int { return len(a) - len(b) })
				for k := 1; k < len(turns); k++ {
					if !slices.Equal(turns[k][:len(turns[k-1])], turns[k-1]) {
						t.Fatalf("conversation %.20q: turn %d does not resend turn %d", sys, k+1, k)
					}
				}
			}
			if want := 10 * tc.wantFollowUps; res.FollowUpPromptTokens < want {
				t.Fatalf("follow-up prompt tokens %d, want >= %d", res.FollowUpPromptTokens, want)
			}
		})
	}
}
