package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// The "chat" workload: conversations that resend their history. Each conversation has a
// unique system message, a first user message and follow-ups; a turn is sent, with every
// earlier message and the replies the server gave, once the conversation's previous turn has
// ended, so between two turns of a conversation the other clients' turns run (a conversation
// is held out while others are served, as a chat front-end's users are).
const (
	chatTurns       = 4  // turns per conversation
	chatSystemWords = 50 // unique system message
	chatFirstWords  = 40 // the first user message
	chatFollowWords = 20 // each follow-up
)

// synthesizeChat builds n requests: conversations of chatTurns turns in order (the last one
// cut short when n is not a multiple), 64 output tokens each; turn 1 is kind short, the
// follow-ups kind long.
func synthesizeChat(n int, rng *rand.Rand, unique func(int) string) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		conv, turn := i/chatTurns+1, i%chatTurns+1
		r := Request{Kind: KindLong, MaxTokens: synthMaxTokens, Conversation: conv, Turn: turn}
		if turn == 1 {
			r.Kind = KindShort
			r.System = fmt.Sprintf("Conversation %d. ", conv) + words(rng, chatSystemWords)
			r.Prompt = unique(chatFirstWords)
		} else {
			r.Prompt = unique(chatFollowWords)
		}
		reqs[i] = r
	}
	return reqs
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// conversations groups the indices of reqs[:total] by conversation, in order of their first
// turn; each group is in request order. ok is false when no request is a chat turn.
func conversations(reqs []Request, total int) (groups [][]int, ok bool) {
	at := map[int]int{}
	for i := range total {
		r := reqs[i%len(reqs)]
		if r.Conversation == 0 {
			continue
		}
		// A cycled workload starts its conversations again: a new group per pass.
		key := r.Conversation + (i/len(reqs))*(1<<30)
		g, seen := at[key]
		if !seen {
			g = len(groups)
			at[key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups, len(groups) > 0
}

// runConversations is Run's loop for a chat workload: each worker takes the next conversation
// and sends its turns one after the other, each with the history so far, recording every
// outcome at its request's index. A turn that fails ends its conversation (the next turn has
// no reply to resend); the turns left are not run.
func (c *client) runConversations(ctx context.Context, workers int, reqs []Request, groups [][]int, outcomes []outcome, finished func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				g := int(next.Add(1) - 1)
				if g >= len(groups) {
					return
				}
				var history []chatMessage
				for _, i := range groups[g] {
					r := reqs[i%len(reqs)]
					if r.System != "" && len(history) == 0 {
						history = append(history, chatMessage{Role: "system", Content: r.System})
					}
					history = append(history, chatMessage{Role: "user", Content: r.Prompt})
					outcomes[i] = c.do(ctx, r, history)
					if outcomes[i].status == statusCancelled {
						return
					}
					finished()
					if outcomes[i].status != statusOK {
						break
					}
					history = append(history, chatMessage{Role: "assistant", Content: outcomes[i].reply})
				}
			}
		})
	}
	wg.Wait()
}
