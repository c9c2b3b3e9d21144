package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"ubatch/tokenizer"
)

func cmdTokenize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "tokenize [-m MODEL] -p TEXT [--ids] [--no-bos] [--parse-special]", stderr)
	path := fs.StringP("model", "m", "", "model or vocab-only GGUF (default: the demo model)")
	text := fs.StringP("prompt", "p", "", "text to tokenize")
	idsOnly := fs.Bool("ids", false, "print only the ids, as a list")
	noBOS := fs.Bool("no-bos", false, "do not add BOS/EOS even if the vocabulary asks for them")
	special := fs.Bool("parse-special", false, "treat special-token text such as <s> as those tokens")
	if err := parse(fs, args); err != nil {
		return err
	}
	f, _, err := openGGUF(ctx, *path)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return err
	}
	ids := tok.Encode(*text, !*noBOS, *special)
	if *idsOnly {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.Itoa(int(id))
		}
		fmt.Fprintf(stdout, "[%s]\n", strings.Join(s, ", "))
		return nil
	}
	for _, id := range ids {
		fmt.Fprintf(stdout, "%6d -> %q\n", id, tok.Token(id))
	}
	return nil
}
