package regex

import "regexp/syntax"

// GBNF refuses a repetition whose body can match the empty string (x* over a nullable x is left
// recursion to its matcher), where a regex allows it: (a|)* is fine to Go. The language is the
// same with the body's empty match taken out, x* = (x - ε)*, so the converter repeats nonEmpty(x).

// nullable reports whether re matches the empty string.
func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpStar, syntax.OpQuest,
		syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !nullable(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if nullable(s) {
				return true
			}
		}
	}
	return false
}

// nonEmpty returns a regex for re's language without the empty string, or nil when that is
// empty. Subexpressions are shared, not copied: the converter's byte limit bounds what writing
// them out costs.
func nonEmpty(re *syntax.Regexp) *syntax.Regexp {
	if !nullable(re) {
		return re
	}
	op := func(o syntax.Op, sub ...*syntax.Regexp) *syntax.Regexp {
		return &syntax.Regexp{Op: o, Flags: re.Flags, Sub: sub, Min: re.Min, Max: re.Max}
	}
	switch re.Op {
	case syntax.OpCapture, syntax.OpQuest:
		return nonEmpty(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if s := nonEmpty(re.Sub[0]); s != nil {
			return op(syntax.OpPlus, s)
		}
	case syntax.OpRepeat:
		s := nonEmpty(re.Sub[0])
		switch {
		case s == nil || re.Max == 0:
			return nil
		case re.Max < 0:
			return op(syntax.OpPlus, s)
		}
		r := op(syntax.OpRepeat, s)
		r.Min = 1
		return r
	case syntax.OpConcat:
		// A non-empty match has a first non-empty part: the parts before it matched empty.
		var alts []*syntax.Regexp
		for i, s := range re.Sub {
			if ne := nonEmpty(s); ne != nil {
				alts = append(alts, op(syntax.OpConcat, append([]*syntax.Regexp{ne}, re.Sub[i+1:]...)...))
			}
		}
		return alternate(alts, op)
	case syntax.OpAlternate:
		var alts []*syntax.Regexp
		for _, s := range re.Sub {
			if ne := nonEmpty(s); ne != nil {
				alts = append(alts, ne)
			}
		}
		return alternate(alts, op)
	}
	return nil // ε itself, or an empty-width assertion (refused by the converter anyway)
}

func alternate(alts []*syntax.Regexp, op func(syntax.Op, ...*syntax.Regexp) *syntax.Regexp) *syntax.Regexp {
	switch len(alts) {
	case 0:
		return nil
	case 1:
		return alts[0]
	}
	return op(syntax.OpAlternate, alts...)
}
