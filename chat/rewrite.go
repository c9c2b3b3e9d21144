package chat

import "strings"

// Names that instrument writes into templates; Render binds them per render.
const (
	// tojsonFilter replaces the tojson filter. The engine resolves its own
	// filters before render-time variables, so its tojson cannot be
	// replaced under its own name (and its indent path sorts keys).
	tojsonFilter = "__chat_tojson"
	// enterFunc and leaveFunc bracket every macro body; tickFunc starts every
	// for-loop body. They enforce the guard's limits (see guard).
	enterFunc = "__chat_enter"
	leaveFunc = "__chat_leave"
	tickFunc  = "__chat_tick"
)

// instrument rewrites a template source so that the engine renders it the
// way Render needs:
//
//   - "| tojson" in expression and statement tags becomes "| __chat_tojson";
//   - "{{ __chat_enter() }}" follows every {% macro %} tag and
//     "{{ __chat_leave() }}" precedes every {% endmacro %}, bounding macro
//     recursion, which would otherwise overflow the goroutine stack (fatal in
//     Go, not a recoverable panic);
//   - "{{ __chat_tick() }}" follows every {% for %} tag, so that runaway
//     loops hit a step limit and an abandoned render stops.
//
// The inserted expressions print nothing and carry no whitespace markers.
// The engine applies a tag's trimming to the nearest text segment, skipping
// other tags, and applies none for unmarked expressions, so the output is
// unchanged. (Statement tags would not do: trim_blocks, which removes one
// newline, would apply twice to the same text.) Text, comments and
// {% raw %} blocks are left alone.
// Tags are delimited exactly as the engine's scanner delimits them; an
// unclosed tag ends the rewrite and is left for the parser to report.
func instrument(src string) string {
	var out strings.Builder
	out.Grow(len(src) + len(src)/8)
	inRaw := false
	i, last := 0, 0
	for i+1 < len(src) {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		kind := src[i+1]
		closer := "}}"
		switch kind {
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		}
		start := i + 2
		end := tagEnd(src, start, closer, kind != '#')
		if end < 0 {
			break
		}
		body := src[start:end]
		next := end + len(closer)
		keyword := ""
		if kind == '%' {
			keyword = stmtKeyword(body)
			switch keyword {
			case "raw":
				inRaw = true
			case "endraw":
				inRaw = false
			}
		}
		if kind == '#' || inRaw {
			i = next
			continue
		}
		out.WriteString(src[last:i])
		if keyword == "endmacro" {
			out.WriteString("{{ " + leaveFunc + "() }}")
		}
		out.WriteString(src[i:start])
		out.WriteString(renameInTag(body, "tojson", tojsonFilter))
		out.WriteString(closer)
		switch keyword {
		case "macro":
			out.WriteString("{{ " + enterFunc + "() }}")
		case "for":
			out.WriteString("{{ " + tickFunc + "() }}")
		}
		last, i = next, next
	}
	out.WriteString(src[last:])
	return out.String()
}

// tagEnd returns the index where the closer of a tag whose content starts at
// start begins, skipping quoted strings when quotes is set, or -1.
func tagEnd(src string, start int, closer string, quotes bool) int {
	for i := start; i < len(src); i++ {
		c := src[i]
		if quotes && (c == '\'' || c == '"') {
			i = skipString(src, i)
			continue
		}
		if strings.HasPrefix(src[i:], closer) {
			return i
		}
	}
	return -1
}

// skipString returns the index of the closing quote of the string literal
// opening at i (len(src) when unterminated).
func skipString(src string, i int) int {
	q := src[i]
	for i++; i < len(src) && src[i] != q; i++ {
		if src[i] == '\\' {
			i++
		}
	}
	return i
}

// stmtKeyword returns the first word of a statement tag's content.
func stmtKeyword(body string) string {
	s := strings.Trim(body, "-+ \t\r\n")
	if j := strings.IndexAny(s, " \t\r\n("); j >= 0 {
		s = s[:j]
	}
	return s
}

// renameInTag renames the filter from to to in one tag's content, outside
// string literals.
func renameInTag(body, from, to string) string {
	var out strings.Builder
	last := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == '\'' || c == '"' {
			i = skipString(body, i)
			continue
		}
		if c != '|' {
			continue
		}
		j := i + 1
		for j < len(body) && strings.IndexByte(" \t\r\n", body[j]) >= 0 {
			j++
		}
		k := j
		for k < len(body) && isIdentByte(body[k]) {
			k++
		}
		if body[j:k] == from {
			out.WriteString(body[last:j])
			out.WriteString(to)
			last = k
		}
		i = k - 1
	}
	if last == 0 {
		return body
	}
	out.WriteString(body[last:])
	return out.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
