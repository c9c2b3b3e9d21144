package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"
)

// maxRange is the largest list range() may build. Jinja2's sandbox, which
// Hugging Face renders chat templates in, refuses larger ranges with the same
// limit; it also keeps a hostile template from allocating without bound.
const maxRange = 100_000

// maxMacroDepth bounds macro recursion. Jinja2 itself fails at a few
// hundred levels (Python's recursion limit); legitimate templates recurse
// only as deep as the JSON schemas they print.
const maxMacroDepth = 1000

// DefaultMaxSteps bounds the loop iterations plus macro calls of one render
// when Options.MaxSteps is zero. Real templates take hundreds to thousands;
// this many take the engine seconds.
const DefaultMaxSteps = 10_000_000

// errAbandoned stops a render whose caller has stopped waiting.
var errAbandoned = errors.New("chat: render abandoned after its deadline")

// guard enforces the limits of one render through the calls instrument
// inserts into the template. Only the rendering goroutine touches depth and
// steps; cancelled is set by the goroutine that gave up waiting.
type guard struct {
	cancelled atomic.Bool
	maxSteps  int
	depth     int
	steps     int
}

func (g *guard) tick() error {
	if g.cancelled.Load() {
		return errAbandoned
	}
	g.steps++
	if g.steps > g.maxSteps {
		return fmt.Errorf("chat: template exceeded %d loop iterations and macro calls", g.maxSteps)
	}
	return nil
}

func (g *guard) enter() error {
	if err := g.tick(); err != nil {
		return err
	}
	g.depth++
	if g.depth > maxMacroDepth {
		return fmt.Errorf("chat: template macros nested deeper than %d calls", maxMacroDepth)
	}
	return nil
}

func (g *guard) leave() { g.depth-- }

func (g *guard) callables() map[string]jinja.Value {
	wrap := func(name string, fn func() error) jinja.Value {
		return jinja.NewCallable(name, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(""), fn()
		})
	}
	return map[string]jinja.Value{
		enterFunc: wrap(enterFunc, g.enter),
		leaveFunc: wrap(leaveFunc, func() error { g.leave(); return nil }),
		tickFunc:  wrap(tickFunc, g.tick),
	}
}

// TemplateError is the error a template raises itself through
// raise_exception(msg), e.g. when a conversation breaks the model's role
// rules. It is the caller's input that is wrong, not the template or engine.
type TemplateError struct {
	Message string
}

func (e *TemplateError) Error() string {
	return "chat template: " + e.Message
}

// globals returns the functions Hugging Face transformers adds to the Jinja
// environment, bound to the clock now, plus the guard's hooks. They shadow
// the engine's builtins of the same names because render-time variables are
// looked up first.
func globals(now func() time.Time, g *guard) map[string]jinja.Value {
	m := g.callables()
	for k, v := range map[string]jinja.Value{
		"raise_exception": jinja.NewCallable("raise_exception", raiseException),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Value{}, fmt.Errorf("strftime_now: expected one format string")
			}
			return jinja.NewString(strftime(now(), args[0].AsString())), nil
		}),
		"range":      jinja.NewCallable("range", boundedRange),
		tojsonFilter: jinja.NewCallable("tojson", tojson),
	} {
		m[k] = v
	}
	return m
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, &TemplateError{Message: "raise_exception called without a message"}
	}
	msg := args[0].String()
	if args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Value{}, &TemplateError{Message: msg}
}

// boundedRange is Python's range(stop) / range(start, stop[, step]) with
// integer arguments, refusing results longer than maxRange.
func boundedRange(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 1 || len(args) > 3 {
		return jinja.Value{}, fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(args))
	}
	ints := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			ints[i] = a.AsInt()
		case a.IsBool():
			if a.AsBool() {
				ints[i] = 1
			}
		default:
			return jinja.Value{}, fmt.Errorf("range: argument %s is not an integer", a.String())
		}
	}
	start, stop, step := int64(0), ints[0], int64(1)
	if len(ints) >= 2 {
		start, stop = ints[0], ints[1]
	}
	if len(ints) == 3 {
		step = ints[2]
	}
	if step == 0 {
		return jinja.Value{}, fmt.Errorf("range: step must not be zero")
	}
	// Count in float64 so that extreme int64 bounds cannot overflow.
	n := int64(0)
	if step > 0 && start < stop {
		n = int64((float64(stop)-float64(start)-1)/float64(step)) + 1
	} else if step < 0 && start > stop {
		n = int64((float64(start)-float64(stop)-1)/float64(-step)) + 1
	}
	if n > maxRange {
		return jinja.Value{}, fmt.Errorf("range: %d items is more than the limit of %d", n, maxRange)
	}
	items := make([]jinja.Value, 0, n)
	for i, v := int64(0), start; i < n; i, v = i+1, v+step {
		items = append(items, jinja.NewInt(v))
	}
	return jinja.NewList(items), nil
}

// strftime formats t as C strftime does in the C locale, which is what
// Python's datetime.strftime calls on Linux. It supports the glibc "-" flag
// (no padding, e.g. "%-d"); unknown directives are copied through unchanged.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(v, width int) {
			s := strconv.Itoa(v)
			if !noPad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch format[i] {
		case 'Y':
			num(t.Year(), 1)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if noPad {
				num(t.Day(), 1)
			} else {
				fmt.Fprintf(&b, "%2d", t.Day())
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			num(int(t.Weekday()), 1)
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'c':
			b.WriteString(strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'x':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'F':
			b.WriteString(strftime(t, "%Y-%m-%d"))
		case 'T':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteString(format[start : i+1])
		}
	}
	return b.String()
}
