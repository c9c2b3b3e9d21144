package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxIndent caps tojson's indent width so that a template cannot make each
// line arbitrarily long; real templates use 2 or 4.
const maxIndent = 1024

// tojson is the tojson filter of Hugging Face transformers:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) with those four keyword arguments (positional indent is
// accepted too). Dicts keep their insertion order unless sort_keys is set.
func tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, fmt.Errorf("tojson: missing value")
	}
	enc := jsonEncoder{itemSep: ", ", keySep: ": "}
	indent := jinja.None()
	if len(args) > 1 {
		indent = args[1]
	}
	if len(args) > 2 {
		return jinja.Value{}, fmt.Errorf("tojson: too many positional arguments")
	}
	for k, v := range kwargs {
		switch k {
		case "indent":
			indent = v
		case "ensure_ascii":
			enc.ascii = v.IsTruthy()
		case "sort_keys":
			enc.sortKeys = v.IsTruthy()
		case "separators":
			if v.IsNone() {
				continue
			}
			if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
				return jinja.Value{}, fmt.Errorf("tojson: separators must be two strings")
			}
			enc.itemSep, enc.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
			enc.customSep = true
		default:
			return jinja.Value{}, fmt.Errorf("tojson: unexpected keyword argument %q", k)
		}
	}
	switch {
	case indent.IsNone() || indent.IsUndefined():
	case indent.IsInt():
		enc.indent = strings.Repeat(" ", int(max(0, min(indent.AsInt(), maxIndent))))
		enc.pretty = true
	case indent.IsString():
		enc.indent = indent.AsString()
		enc.pretty = true
	default:
		return jinja.Value{}, fmt.Errorf("tojson: indent must be an integer or a string")
	}
	// Python drops the space after the item separator when indenting,
	// unless separators were given explicitly.
	if enc.pretty && !enc.customSep {
		enc.itemSep = ","
	}
	var b strings.Builder
	if err := enc.encode(&b, args[0], 0); err != nil {
		return jinja.Value{}, err
	}
	return jinja.NewString(b.String()), nil
}

type jsonEncoder struct {
	itemSep, keySep string
	customSep       bool
	pretty          bool
	indent          string
	ascii           bool
	sortKeys        bool
}

func (e *jsonEncoder) newline(b *strings.Builder, level int) {
	if !e.pretty {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(e.indent)
	}
}

func (e *jsonEncoder) encode(b *strings.Builder, v jinja.Value, level int) error {
	if level > maxValueDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxValueDepth)
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat(), true))
	case v.IsString():
		e.writeString(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			if err := e.encode(b, item, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.OrderedKeys()
		if e.sortKeys {
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			e.writeString(b, k)
			b.WriteString(e.keySep)
			item, _ := d.Get(k)
			if err := e.encode(b, item, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte('}')
	case v.IsUndefined():
		return fmt.Errorf("tojson: value is undefined")
	default:
		return fmt.Errorf("tojson: cannot serialise %s", v.String())
	}
	return nil
}

// writeString writes s as Python's json module does: the short escapes
// for quote, backslash and \b\f\n\r\t, \u00XX for other control
// characters, and with ensure_ascii every non-ASCII character as \uXXXX
// (surrogate pairs above U+FFFF). Invalid UTF-8 becomes U+FFFD.
// Python's json.dumps does the same for the strings templates hold.
func (e *jsonEncoder) writeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (e.ascii && r == 0x7f):
				fmt.Fprintf(b, `\u%04x`, r)
			case e.ascii && r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			case e.ascii && r > 0x7f:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f as Python's repr(float) does: the shortest digits that
// round-trip, positional for exponents in [-4, 16) with at least one
// decimal ("1.0"), scientific otherwise ("1e-05", "1.5e+16"). With json
// set, non-finite values are spelled as json.dumps spells them.
func pyFloat(f float64, json bool) string {
	switch {
	case math.IsNaN(f):
		if json {
			return "NaN"
		}
		return "nan"
	case math.IsInf(f, 1):
		if json {
			return "Infinity"
		}
		return "inf"
	case math.IsInf(f, -1):
		if json {
			return "-Infinity"
		}
		return "-inf"
	}
	// 'e' with precision -1 gives the shortest round-trip digits:
	// [-]d[.ddd]e±XX.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
