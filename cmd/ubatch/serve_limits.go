package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"ubatch/chat"
	"ubatch/grammar"
	"ubatch/server"
)

// constraintFlags are serve's limits on the output constraints a request may ask for (grammar,
// json_schema, response_format, tools): what they may cost to compile, and to follow token by
// token on the scheduler's step, which every other stream waits for.
type constraintFlags struct {
	lim        server.RequestLimits
	sampleTime time.Duration
	// parseBudget and parseWait size the server's server.ParseBudget: the bytes of large
	// bodies rendered and tokenized at once, and how long a request waits for them.
	parseBudget int64
	parseWait   time.Duration
}

func (c *constraintFlags) register(fs *pflag.FlagSet) {
	g := &c.lim.Grammar
	fs.IntVar(&g.MaxBytes, "grammar-max-bytes", grammar.DefaultMaxBytes, "largest GBNF a constraint may be or convert to (a JSON schema's grammar included); 400 beyond it")
	fs.IntVar(&g.MaxRules, "grammar-max-rules", grammar.DefaultMaxRules, "most rules of one constraint's grammar; 400 beyond it")
	fs.IntVar(&g.MaxAlternatives, "grammar-max-alternatives", grammar.DefaultMaxAlternatives, "most alternatives of one grammar rule or group (an enum's values, an anyOf's branches); 400 beyond it")
	fs.IntVar(&g.MaxRepetition, "grammar-max-repetition", grammar.DefaultMaxRepetition, "largest {m,n} bound of a grammar (a schema's maxLength, maxItems); 400 beyond it")
	fs.IntVar(&g.MaxElements, "grammar-max-elements", grammar.DefaultMaxElements, "most elements of a grammar once its repetitions are written out; 400 beyond it")
	fs.DurationVar(&g.MaxTime, "grammar-max-time", grammar.DefaultMaxTime, "longest compilation of one request's constraint (all its tools together); 400 beyond it")
	fs.IntVar(&c.lim.GrammarBudget, "grammar-budget", grammar.DefaultBudget, "work units one token's grammar mask may take (a few milliseconds at the default); a sequence past it ends with a 400 (or an error event)")
	fs.DurationVar(&c.sampleTime, "max-sample-time", 0, "mean time one sequence's sampling may take per token over 8 tokens, since every stream waits for it; a sequence above it ends with a 400 (or an error event). 0 = half --target-itl, at least 5ms (50ms without a target); negative = no bound")
	fs.IntVar(&c.lim.MaxTools, "max-tools", server.DefaultMaxTools, "most tools of one chat request; 400 beyond it")
	fs.IntVar(&c.lim.MaxToolsBytes, "max-tools-bytes", server.DefaultMaxToolsBytes, "largest size of one chat request's tools' parameters in all, in bytes; 400 beyond it")
	fs.IntVar(&c.lim.MaxMessages, "max-messages", server.DefaultMaxMessages, "most messages of one chat request, counted before any is parsed; 400 beyond it")
	fs.IntVar(&c.lim.MaxContentParts, "max-content-parts", server.DefaultMaxContentParts, "most content parts of one chat message; 400 beyond it")
	fs.DurationVar(&c.lim.RenderTimeout, "render-timeout", chat.DefaultTimeout, "longest render of one request's messages by the chat template; 400 beyond it")
	fs.Int64Var(&c.parseBudget, "parse-budget", server.DefaultParseBudget, "bytes of request bodies over 64 KiB whose text may be rendered and tokenized at once, server-wide (tokenizing takes up to ~130 bytes of heap a byte); a request beyond it waits up to --parse-wait, then gets 503 with Retry-After")
	fs.DurationVar(&c.parseWait, "parse-wait", server.DefaultParseWait, "longest wait of a request for the --parse-budget; 503 with Retry-After beyond it")
}

// check refuses a limit that is not positive, naming its flag.
func (c *constraintFlags) check() error {
	g := c.lim.Grammar
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"grammar-max-bytes", int64(g.MaxBytes)}, {"grammar-max-rules", int64(g.MaxRules)},
		{"grammar-max-alternatives", int64(g.MaxAlternatives)}, {"grammar-max-repetition", int64(g.MaxRepetition)},
		{"grammar-max-elements", int64(g.MaxElements)}, {"grammar-max-time", int64(g.MaxTime)},
		{"grammar-budget", int64(c.lim.GrammarBudget)}, {"max-tools", int64(c.lim.MaxTools)},
		{"max-tools-bytes", int64(c.lim.MaxToolsBytes)}, {"max-messages", int64(c.lim.MaxMessages)},
		{"max-content-parts", int64(c.lim.MaxContentParts)}, {"render-timeout", int64(c.lim.RenderTimeout)},
		{"parse-budget", c.parseBudget}, {"parse-wait", int64(c.parseWait)},
	} {
		if f.v <= 0 {
			return fmt.Errorf("--%s must be positive", f.name)
		}
	}
	return nil
}
