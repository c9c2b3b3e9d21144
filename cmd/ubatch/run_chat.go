package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"ubatch/chat"
	"ubatch/model"
	"ubatch/runner"
	"ubatch/sample"
)

// chatHelp is what /? prints in ubatch run's interactive session.
const chatHelp = `Available commands:
  /clear          forget the conversation so far
  /bye            exit (also Ctrl-D)
  /?, /help       this help

Use """ to begin and end a message of several lines.
`

// chatSession is ubatch run without -p: Ollama's interactive run. Each message goes through the
// model's chat template with the conversation so far (history within the session); a model
// without one (the demo model) continues the text so far, the messages appended to it. The
// whole conversation is computed again for each reply (the loop's KV cache is reset): simple,
// and a turn costs one prompt evaluation of the conversation.
type chatSession struct {
	m       *model.Model
	loop    *runner.Loop
	nCtx    int
	limit   int // most tokens of one reply
	params  sample.Params
	tmpl    *chat.Template // nil: continue the text
	history []map[string]any
	text    string // the text so far, without a template
}

// runChat reads messages from in until /bye or EOF and streams each reply to out.
func runChat(ctx context.Context, m *model.Model, lctx *runner.Runtime, params sample.Params, limit int, in io.Reader, out io.Writer) error {
	s, err := newChatSession(m, lctx, params, limit)
	if err != nil {
		return err
	}
	return s.run(ctx, in, out)
}

// newChatSession starts a session on the model's context (one sequence); limit bounds each
// reply's tokens (-1: up to the context).
func newChatSession(m *model.Model, lctx *runner.Runtime, params sample.Params, limit int) (*chatSession, error) {
	loop, err := newLoop(lctx, 1)
	if err != nil {
		return nil, err
	}
	s := &chatSession{m: m, loop: loop, nCtx: lctx.Options().NCtx, limit: limit, params: params}
	if src := m.ChatTemplate(); src != "" {
		if s.tmpl, err = chat.Parse(src); err != nil {
			slog.Warn("the model's chat template does not parse: continuing the text instead", "err", err)
			s.tmpl = nil
		}
	}
	return s, nil
}

// run is the session's read-reply loop.
func (s *chatSession) run(ctx context.Context, in io.Reader, out io.Writer) error {
	done := make(chan struct{})
	defer close(done)
	lines := readLines(in, done)
	for ctx.Err() == nil {
		msg, err := readMessage(ctx, lines, out)
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(out)
			return nil
		} else if err != nil {
			return err
		}
		switch cmd := strings.TrimSpace(msg); {
		case cmd == "":
			continue
		case cmd == "/bye":
			return nil
		case cmd == "/clear":
			s.history, s.text = nil, ""
			fmt.Fprintln(out, "Cleared session context")
			continue
		case cmd == "/?" || cmd == "/help":
			fmt.Fprint(out, chatHelp)
			continue
		case strings.HasPrefix(cmd, "/") && !strings.Contains(cmd, " ") && !strings.Contains(cmd, "\n"):
			fmt.Fprintf(out, "Unknown command '%s'. Type /? for help\n", cmd)
			continue
		}
		if err := s.reply(ctx, msg, out); err != nil {
			var full *contextFull
			if !errors.As(err, &full) {
				return err
			}
			fmt.Fprintf(out, "%v\n\n", err)
		}
	}
	return nil
}

// readLines sends in's lines (without their line ends) on the channel it returns, closed at
// the end of the input, so that the session can stop on ctx (Ctrl-C) while a read waits. It
// stops sending once done is closed.
func readLines(in io.Reader, done <-chan struct{}) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- strings.TrimRight(sc.Text(), "\r"):
			case <-done:
				return
			}
		}
	}()
	return lines
}

// readMessage prints the prompt and reads one message: a line, or with """ the lines up to the
// closing """. It returns io.EOF at the end of the input (or when ctx ends) with nothing read.
func readMessage(ctx context.Context, lines <-chan string, out io.Writer) (string, error) {
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-ctx.Done():
			return "", false
		}
	}
	fmt.Fprint(out, ">>> ")
	line, ok := next()
	if !ok {
		return "", io.EOF
	}
	rest, multi := strings.CutPrefix(line, `"""`)
	if !multi {
		return line, nil
	}
	if body, ok := strings.CutSuffix(rest, `"""`); ok {
		return body, nil // """one line"""
	}
	msg := []string{rest}
	for {
		fmt.Fprint(out, "... ")
		l, ok := next()
		if !ok { // the input ended inside the message: take what came
			break
		}
		if body, closed := strings.CutSuffix(l, `"""`); closed {
			msg = append(msg, body)
			break
		}
		msg = append(msg, l)
	}
	return strings.TrimPrefix(strings.Join(msg, "\n"), "\n"), nil
}

// contextFull is a conversation that no longer fits the context; the session goes on.
type contextFull struct{ n, nCtx int }

func (e *contextFull) Error() string {
	return fmt.Sprintf("the conversation is %d tokens and the context holds %d: /clear to start again (or raise -c)", e.n, e.nCtx)
}

// reply computes the conversation with msg and streams the model's answer.
func (s *chatSession) reply(ctx context.Context, msg string, out io.Writer) error {
	toks, err := s.tokens(msg)
	if err != nil {
		return err
	}
	if len(toks) >= s.nCtx {
		return &contextFull{len(toks), s.nCtx}
	}
	smp, err := sample.New(s.params, s.m.Hparams().Vocab)
	if err != nil {
		return err
	}
	for _, t := range toks {
		smp.Accept(t)
	}
	s.loop.Reset()
	if err := s.loop.Prompt(seq0, toks, nil); err != nil {
		return err
	}
	limit := s.limit
	if limit < 0 {
		limit = s.nCtx
	}
	stream := s.m.Vocab.NewStream()
	var answer strings.Builder // the text as written, for a session without a template
	shown := newReplyText(out, s.tmpl)
	err = s.loop.Generate(ctx, limit, func(_ int, logits []float32) (int32, bool, error) {
		tok, err := smp.Pick(logits)
		if err != nil {
			return 0, false, err
		}
		smp.Accept(tok)
		if s.m.Vocab.IsEOG(tok) {
			return 0, false, nil
		}
		piece := stream.Add(tok)
		answer.WriteString(piece)
		shown.add(piece)
		return tok, true, nil
	})
	tail := stream.Flush()
	answer.WriteString(tail)
	shown.add(tail)
	shown.finish()
	fmt.Fprint(out, "\n\n")
	if s.tmpl != nil {
		s.history = append(s.history, map[string]any{"role": "user", "content": msg}, shown.message())
	} else {
		s.text += msg + answer.String() + "\n"
	}
	return err
}

// tokens are the conversation with msg as the model reads it: through the chat template (BOS
// added when the model wants one and the template did not write it), else the text so far
// followed by msg.
func (s *chatSession) tokens(msg string) ([]int32, error) {
	v := s.m.Vocab
	if s.tmpl == nil {
		return v.Encode(s.text+msg, true, true), nil
	}
	var bos, eos string
	if v.BOS() >= 0 {
		bos = v.Token(v.BOS())
	}
	if v.EOS() >= 0 {
		eos = v.Token(v.EOS())
	}
	msgs := append(s.history[:len(s.history):len(s.history)], map[string]any{"role": "user", "content": msg})
	text, err := s.tmpl.Render(msgs, chat.Options{BOS: bos, EOS: eos, AddGenerationPrompt: true})
	if err != nil {
		return nil, fmt.Errorf("the chat template: %w", err)
	}
	toks := v.Encode(text, false, true)
	if v.AddBOS() && v.BOS() >= 0 && (bos == "" || !strings.HasPrefix(text, bos)) {
		toks = append([]int32{v.BOS()}, toks...)
	}
	return toks, nil
}
