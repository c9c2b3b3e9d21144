package grammar

import (
	"context"
	"fmt"
	"time"
)

// Limits bound what compiling one grammar may cost, so that a hostile grammar (or JSON Schema,
// whose converter shares them) is refused with a LimitError instead of exhausting the server's
// memory or CPU. A zero field takes its default; the defaults accept every grammar of llama.cpp's
// grammars/ folder and every schema the jsonschema package documents with room to spare (those
// use a few dozen rules, at most a few alternatives per rule and repetitions of at most a few
// thousand; a schema's maxLength and maxItems go up to 10000).
type Limits struct {
	// MaxBytes bounds the GBNF source text, in bytes (default 1 MiB; a converted schema's
	// grammar counts too, and conversion stops when its output passes this).
	MaxBytes int
	// MaxRules bounds the rules the source defines, not counting those that groups and
	// repetitions add (default 10000; a schema gives about two per property).
	MaxRules int
	// MaxAlternatives bounds the alternatives of one rule or parenthesised group, such as the
	// values of one JSON Schema enum (default 10000).
	MaxAlternatives int
	// MaxRepetition bounds m and n of x{m,n} (default 10000).
	MaxRepetition int
	// MaxElements bounds the compiled program: the symbols of every alternative after
	// repetitions are expanded, x{0,n} costing about 4n (default 1<<19, 4 MiB of program).
	MaxElements int
	// MaxTime bounds the wall time of one compilation (default 2 s; a grammar within the
	// other limits compiles in well under 0.5 s on a small CPU).
	MaxTime time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxBytes        = 1 << 20
	DefaultMaxRules        = 10000
	DefaultMaxAlternatives = 10000
	DefaultMaxRepetition   = 10000
	DefaultMaxElements     = 1 << 19
	DefaultMaxTime         = 2 * time.Second
)

// withDefaults fills the zero fields of l.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxBytes, DefaultMaxBytes)
	def(&l.MaxRules, DefaultMaxRules)
	def(&l.MaxAlternatives, DefaultMaxAlternatives)
	def(&l.MaxRepetition, DefaultMaxRepetition)
	def(&l.MaxElements, DefaultMaxElements)
	if l.MaxTime <= 0 {
		l.MaxTime = DefaultMaxTime
	}
	return l
}

// Names of the limits in LimitError.Limit.
const (
	LimitBytes        = "bytes"
	LimitRules        = "rules"
	LimitAlternatives = "alternatives"
	LimitRepetition   = "repetitions"
	LimitElements     = "elements"
	LimitTime         = "milliseconds of compilation"
	LimitStart        = "parses at the start" // the start state needs more than maxVisits parses
)

// LimitError reports that a grammar (or a schema's grammar) asks for more than a limit allows:
// Limit names it (one of the Limit constants), Max is its value and Got what the input needed
// (or how far compilation got before it stopped: then Got is just past Max).
type LimitError struct {
	Limit    string
	Max, Got int
}

func (e *LimitError) Error() string {
	hint := "simplify the grammar"
	switch e.Limit {
	case LimitBytes:
		hint = "send a smaller grammar or schema"
	case LimitRules:
		hint = "use fewer rules, or fewer properties or anyOf branches in a schema"
	case LimitAlternatives:
		hint = "use fewer alternatives in one rule, or fewer enum values or anyOf branches"
	case LimitRepetition:
		hint = "use smaller {m,n} bounds, or smaller maxLength/maxItems"
	case LimitElements:
		hint = "the expanded grammar is too large: use smaller {m,n} bounds or fewer of them"
	case LimitStart:
		hint = "too many parses begin at once: use fewer alternatives or optional items in a row"
	}
	return fmt.Sprintf("grammar: %d %s exceed the limit of %d (%s)", e.Got, e.Limit, e.Max, hint)
}

// Unwrap makes a start-state error match ErrTooAmbiguous, the same limit met while matching.
func (e *LimitError) Unwrap() error {
	if e.Limit == LimitStart {
		return ErrTooAmbiguous
	}
	return nil
}

// clock ends a compilation that is cancelled or takes longer than its limit. tick is cheap
// enough to call per parsed symbol or emitted element: it reads the time every 1024 calls.
type clock struct {
	ctx   context.Context
	start time.Time
	max   time.Duration
	n     int
	err   error // sticky: once stopped, every later tick fails the same way
}

func newClock(ctx context.Context, max time.Duration) *clock {
	return &clock{ctx: ctx, start: time.Now(), max: max}
}

func (c *clock) tick() error {
	if c.n++; c.n&1023 != 0 || c.err != nil {
		return c.err
	}
	return c.check()
}

// check tests the context and the deadline now.
func (c *clock) check() error {
	if c.err != nil {
		return c.err
	}
	if err := c.ctx.Err(); err != nil {
		c.err = fmt.Errorf("grammar: compilation stopped: %w", err)
	} else if d := time.Since(c.start); d > c.max {
		c.err = TimeLimit(c.max, d)
	}
	return c.err
}

// TimeLimit is the LimitError of a compilation (or schema conversion) that took d, more than
// limit. Its figures are whole milliseconds, Got above Max even when rounding makes them equal.
func TimeLimit(limit, d time.Duration) *LimitError {
	e := &LimitError{Limit: LimitTime, Max: int(limit.Milliseconds()), Got: int(d.Milliseconds())}
	e.Got = max(e.Got, e.Max+1)
	return e
}
