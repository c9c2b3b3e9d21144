package jsonschema

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// maxCount bounds minItems, maxItems, minLength and maxLength: each unit of a bound becomes a
// grammar rule.
const maxCount = 10000

// count reads a non-negative integer keyword; ok is false when it is absent.
func count(s *object, key, path string) (n int, ok bool, err error) {
	v, present := s.get(key)
	if !present {
		return 0, false, nil
	}
	num, isNum := v.(json.Number)
	i, convErr := num.Int64()
	if !isNum || convErr != nil || i < 0 {
		return 0, false, schemaError(path, "%s must be a non-negative integer", key)
	}
	if i > maxCount {
		return 0, false, schemaError(path, "%s %d is above the supported %d", key, i, maxCount)
	}
	return int(i), true, nil
}

// bounds reads a min/max keyword pair (max -1: none) and checks min <= max.
func bounds(s *object, minKey, maxKey, path string) (lo, hi int, err error) {
	lo, _, err = count(s, minKey, path)
	if err != nil {
		return 0, 0, err
	}
	hi, hasMax, err := count(s, maxKey, path)
	if err != nil {
		return 0, 0, err
	}
	if !hasMax {
		return lo, -1, nil
	}
	if hi < lo {
		return 0, 0, schemaError(path, "%s %d is below %s %d", maxKey, hi, minKey, lo)
	}
	return lo, hi, nil
}

// repeat is GBNF for item repeated lo..hi times (hi -1: unbounded).
func repeat(item string, lo, hi int) string {
	switch {
	case hi < 0:
		return fmt.Sprintf("%s{%d,}", item, lo)
	case lo == hi:
		return fmt.Sprintf("%s{%d}", item, lo)
	}
	return fmt.Sprintf("%s{%d,%d}", item, lo, hi)
}

func (c *converter) visitString(s *object, name, path string) (string, error) {
	lo, hi, err := bounds(s, "minLength", "maxLength", path)
	if err != nil {
		return "", err
	}
	if pat, ok := s.get("pattern"); ok {
		ps, isStr := pat.(string)
		if !isStr {
			return "", schemaError(path, "pattern must be a string")
		}
		for _, k := range []string{"minLength", "maxLength", "format"} {
			if _, has := s.get(k); has {
				return "", schemaError(path, "pattern cannot be combined with %s", k)
			}
		}
		expr, err := patternGrammar(ps)
		if err != nil {
			return "", schemaError(path, "%v", err)
		}
		c.prim("plain-char")
		c.prim("space")
		return c.add(name, `"\"" `+expr+` "\"" space`), nil
	}
	if f, ok := s.get("format"); ok {
		fs, _ := f.(string)
		switch fs {
		case "date", "time", "date-time", "uuid":
			if _, has := s.get("minLength"); has {
				return "", schemaError(path, "minLength cannot be combined with format %q", fs)
			}
			if _, has := s.get("maxLength"); has {
				return "", schemaError(path, "maxLength cannot be combined with format %q", fs)
			}
			return c.prim(fs + "-string"), nil
		}
		// Other formats are annotations, as JSON Schema validators treat them by default.
	}
	if lo == 0 && hi < 0 {
		return c.prim("string"), nil
	}
	c.prim("char")
	c.prim("space")
	return c.add(name, `"\"" `+repeat("char", lo, hi)+` "\"" space`), nil
}

func (c *converter) visitArray(s *object, name, path string) (string, error) {
	lo, hi, err := bounds(s, "minItems", "maxItems", path)
	if err != nil {
		return "", err
	}
	var item string
	if it, ok := s.get("items"); !ok {
		item = c.prim("value")
	} else {
		if b, isBool := it.(bool); isBool && !b {
			hi = 0 // no item is valid: only the empty array
			if lo > 0 {
				return "", schemaError(path, "items false with minItems %d accepts nothing", lo)
			}
		} else if item, err = c.visit(it, name+"-item", path+"/items"); err != nil {
			return "", err
		}
	}
	c.prim("space")
	if hi == 0 {
		return c.add(name, `"[" space "]" space`), nil
	}
	restHi := -1
	if hi > 0 {
		restHi = hi - 1
	}
	more := repeat(`("," space `+item+`)`, max(lo-1, 0), restHi)
	if restHi == 0 {
		more = ""
	}
	elems := strings.TrimSpace(item + " " + more)
	if lo == 0 {
		elems = "(" + elems + ")?"
	}
	return c.add(name, `"[" space `+elems+` "]" space`), nil
}

func (c *converter) visitInteger(s *object, name, path string) (string, error) {
	var lo, hi *int64
	limit := math.Pow10(maxIntDigits - 1) // bounds beyond this are looser than the digit cap
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		num, isNum := v.(json.Number)
		f, err := num.Float64()
		if !isNum || err != nil || math.IsNaN(f) {
			return "", schemaError(path, "%s must be a number", k)
		}
		if math.Abs(f) >= limit {
			return "", schemaError(path, "%s %v is beyond the supported ±1e15", k, f)
		}
		var b int64
		switch k {
		case "minimum":
			b = int64(math.Ceil(f))
		case "exclusiveMinimum":
			b = int64(math.Floor(f)) + 1
		case "maximum":
			b = int64(math.Floor(f))
		case "exclusiveMaximum":
			b = int64(math.Ceil(f)) - 1
		}
		if strings.HasSuffix(k, "inimum") {
			if lo == nil || b > *lo {
				lo = &b
			}
		} else if hi == nil || b < *hi {
			hi = &b
		}
	}
	if lo == nil && hi == nil {
		return c.prim("integer"), nil
	}
	if lo != nil && hi != nil && *lo > *hi {
		return "", schemaError(path, "no integer lies between the minimum and the maximum")
	}
	c.prim("space")
	return c.add(name, intRange(lo, hi)+" space"), nil
}

// visitProperties builds an object rule: the required properties in the schema's order, then
// each optional one in order (each may be left out), then, when additionalProperties allows
// them, any number of other properties whose names differ from the listed ones.
func (c *converter) visitProperties(s *object, name, path string) (string, error) {
	props := &object{vals: map[string]any{}}
	if v, ok := s.get("properties"); ok {
		p, isObj := v.(*object)
		if !isObj {
			return "", schemaError(path, "properties must be an object")
		}
		props = p
	}
	required, reqOrder, err := requiredNames(s, path)
	if err != nil {
		return "", err
	}
	keys := slices.Clone(props.keys)
	for _, k := range reqOrder {
		if _, listed := props.get(k); !listed {
			keys = append(keys, k) // required but not described: any value
		}
	}
	c.prim("space")
	var req, opt []string
	for _, k := range keys {
		sub, listed := props.get(k)
		subPath := path + "/properties/" + pointerKey(k)
		if !listed {
			// Required but not listed: additionalProperties decides its value.
			sub, subPath = true, path+"/additionalProperties"
			if ap, ok := s.get("additionalProperties"); ok {
				if b, isBool := ap.(bool); isBool && !b {
					return "", schemaError(path, "required property %q is not in properties, and additionalProperties is false", k)
				}
				sub = ap
			}
		}
		valRule, err := c.visit(sub, name+"-"+k, subPath)
		if err != nil {
			return "", err
		}
		var sb strings.Builder
		encodeString(&sb, k)
		kv := c.add(name+"-"+k+"-kv", literal(sb.String())+` space ":" space `+valRule)
		if required[k] {
			req = append(req, kv)
		} else {
			opt = append(opt, kv)
		}
	}
	extra, err := c.additional(s, name, path, keys)
	if err != nil {
		return "", err
	}
	body := c.objectBody(name, req, opt, extra)
	return c.add(name, strings.TrimSpace(`"{" space `+body+` "}" space`)), nil
}

// requiredNames reads the schema's required list: the set of names and their first-seen order.
func requiredNames(s *object, path string) (map[string]bool, []string, error) {
	required := map[string]bool{}
	var order []string
	v, ok := s.get("required")
	if !ok {
		return required, nil, nil
	}
	list, isList := v.([]any)
	if !isList {
		return nil, nil, schemaError(path, "required must be a list of property names")
	}
	for _, e := range list {
		k, isStr := e.(string)
		if !isStr {
			return nil, nil, schemaError(path, "required must be a list of property names")
		}
		if !required[k] {
			required[k] = true
			order = append(order, k)
		}
	}
	return required, order, nil
}

// objectBody returns what goes between an object's braces: the required properties' key-value
// rules req in order, then the optional ones opt, each at most once in order, then any number of
// extra properties (the rule extra, "" when none are allowed).
func (c *converter) objectBody(name string, req, opt []string, extra string) (body string) {
	if len(req) > 0 {
		// A builder, not +=: an object may have thousands of optional properties.
		var sb strings.Builder
		sb.WriteString(strings.Join(req, ` "," space `))
		for _, o := range opt {
			sb.WriteString(` ("," space ` + o + `)?`)
		}
		if extra != "" {
			sb.WriteString(` ("," space ` + extra + `)*`)
		}
		body = sb.String()
	} else {
		// Nothing is required: whichever property comes first has no comma before it.
		tail := ""
		if extra != "" {
			tail = c.add(name+"-rest", `("," space `+extra+`)*`)
		}
		tails := make([]string, len(opt)+1)
		tails[len(opt)] = tail
		for i := len(opt) - 1; i >= 1; i-- { // tails[0] would follow nothing
			t := `("," space ` + opt[i] + `)?`
			if tails[i+1] != "" {
				t += " " + tails[i+1]
			}
			tails[i] = c.add(fmt.Sprintf("%s-after-%d", name, i), t)
		}
		var alts []string
		for i, o := range opt {
			alts = append(alts, strings.TrimSpace(o+" "+tails[i+1]))
		}
		if extra != "" {
			alts = append(alts, extra+" "+tail)
		}
		if len(alts) > 0 {
			body = "(" + strings.Join(alts, " | ") + ")?"
		}
	}
	return body
}

// additional returns the rule of one extra property ("" when none are allowed): a name that is
// none of the listed keys, then a value of the additionalProperties schema.
func (c *converter) additional(s *object, name, path string, keys []string) (string, error) {
	v, ok := s.get("additionalProperties")
	if !ok {
		return "", nil // stricter than JSON Schema's default, never looser
	}
	var valRule string
	switch t := v.(type) {
	case bool:
		if !t {
			return "", nil
		}
		valRule = c.prim("value")
	default:
		var err error
		if valRule, err = c.visit(v, name+"-additional", path+"/additionalProperties"); err != nil {
			return "", err
		}
	}
	key := c.prim("string")
	if len(keys) > 0 {
		key = c.notStrings(name+"-additional-key", keys)
	}
	return c.add(name+"-additional-kv", key+` ":" space `+valRule), nil
}

// notStrings returns a rule matching a JSON string (and space) whose value is none of words. Its
// characters are plain (no escapes), so that the text is the value: an escape could spell one
// of the words in another way.
func (c *converter) notStrings(name string, words []string) string {
	type trie struct {
		kids  map[rune]*trie
		order []rune
		end   bool
	}
	root := &trie{kids: map[rune]*trie{}}
	for _, w := range words {
		n := root
		for _, r := range w {
			k, ok := n.kids[r]
			if !ok {
				k = &trie{kids: map[rune]*trie{}}
				n.kids[r] = k
				n.order = append(n.order, r)
			}
			n = k
		}
		n.end = true
	}
	c.prim("plain-char")
	c.prim("space")
	rest := c.add(name+"-rest", `plain-char* "\""`)
	// Every trie node's rule has the same base name, numbered by add: a name per depth (label
	// plus "-c" per level, as before) made the output quadratic in the length of a long key.
	label := name + "-c"
	var build func(n *trie) string
	build = func(n *trie) string {
		if c.err != nil {
			return "" // a limit was met: the conversion fails, stop building
		}
		var alts []string
		var exclude strings.Builder
		exclude.WriteString(`"\\\x7F\x00-\x1F`)
		for _, r := range n.order {
			alts = append(alts, literal(string(r))+" "+build(n.kids[r]))
			fmt.Fprintf(&exclude, `\U%08X`, r)
		}
		alts = append(alts, "[^"+exclude.String()+"] "+rest)
		if !n.end {
			alts = append(alts, `"\""`)
		}
		return c.add(label, strings.Join(alts, " | "))
	}
	return c.add(name, `"\"" `+build(root)+" space")
}
