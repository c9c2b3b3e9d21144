package server

import (
	"strings"
	"testing"
	"unicode/utf8"

	"ubatch/internal/testdata"
	"ubatch/model"
	_ "ubatch/model/all"
)

func openStories(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.Open(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestTextStreamStopStrings(t *testing.T) {
	m := openStories(t)
	const story = " there was a little girl named Lily. She loved to play"
	tests := []struct {
		name     string
		text     string
		stop     []string
		want     string
		wantWord string
	}{
		{name: "no stop strings", text: story, want: story},
		{name: "stop absent", text: story, stop: []string{"dragon"}, want: story},
		{name: "stop in the middle", text: story, stop: []string{"Lily"}, want: " there was a little girl named ", wantWord: "Lily"},
		{name: "stop spanning tokens", text: story, stop: []string{"girl nam"}, want: " there was a little ", wantWord: "girl nam"},
		{name: "stop at the start", text: story, stop: []string{" there"}, want: "", wantWord: " there"},
		{name: "earliest of several", text: story, stop: []string{"She", "named"}, want: " there was a little girl ", wantWord: "named"},
		{name: "prefix of a stop at the end is released", text: " named Li", stop: []string{"Lily"}, want: " named Li"},
		{name: "multi-byte characters", text: " café 😀 naïve", want: " café 😀 naïve"},
		{name: "stop after multi-byte", text: " café 😀 naïve", stop: []string{"😀"}, want: " café ", wantWord: "😀"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// SPM encodes a leading space itself, and the streaming decoder keeps it.
			toks := m.Vocab.Encode(strings.TrimPrefix(tc.text, " "), false, false)
			if got := m.Vocab.Decode(toks); strings.TrimPrefix(tc.text, " ") != got {
				t.Fatalf("tokenizer round trip: %q -> %q", tc.text, got)
			}
			ts := newTextStream(m.Vocab, tc.stop)
			var out strings.Builder
			var released []GenToken
			word := ""
			for i, id := range toks {
				text, rel, w := ts.add(GenToken{ID: id})
				if !utf8.ValidString(text) {
					t.Fatalf("chunk %q is not valid UTF-8", text)
				}
				out.WriteString(text)
				released = append(released, rel...)
				for _, s := range tc.stop {
					if strings.Contains(out.String(), s) {
						t.Fatalf("after token %d the released text %q contains stop %q", i, out.String(), s)
					}
				}
				if w != "" {
					word = w
					break
				}
			}
			text, rel, w := ts.flush()
			out.WriteString(text)
			released = append(released, rel...)
			if w != "" {
				word = w
			}
			if out.String() != tc.want || word != tc.wantWord {
				t.Fatalf("text %q stop %q, want %q stop %q", out.String(), word, tc.want, tc.wantWord)
			}
			// Released tokens are those whose text starts before the cut, with offsets into it.
			for i, g := range released {
				if g.offset > len(tc.want) || (i > 0 && g.offset < released[i-1].offset) {
					t.Fatalf("token %d offset %d (text %d bytes)", i, g.offset, len(tc.want))
				}
			}
			if tc.wantWord == "" && len(released) != len(toks) {
				t.Fatalf("released %d tokens of %d", len(released), len(toks))
			}
		})
	}
}
