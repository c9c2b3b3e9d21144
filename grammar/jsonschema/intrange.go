package jsonschema

import (
	"fmt"
	"strconv"
	"strings"
)

// maxIntDigits bounds the digits of a generated integer (and of a number's integral part), so
// that every generated number fits a float64 exactly enough and the output stays finite.
const maxIntDigits = 16

// intRange returns a GBNF expression for the decimal integers in [lo, hi] without leading
// zeros; nil bounds are open (limited to maxIntDigits digits). The caller checks lo <= hi.
func intRange(lo, hi *int64) string {
	var alts []string
	if hi == nil || *hi >= 0 {
		var nlo uint64
		if lo != nil && *lo > 0 {
			nlo = uint64(*lo)
		}
		var nhi *uint64
		if hi != nil {
			h := uint64(*hi)
			nhi = &h
		}
		alts = append(alts, natRange(nlo, nhi)...)
	}
	if lo == nil || *lo < 0 {
		// v = -u with u in [ulo, uhi], u >= 1.
		ulo := uint64(1)
		if hi != nil && *hi < 0 {
			ulo = uint64(-*hi)
		}
		var uhi *uint64
		if lo != nil {
			u := uint64(-*lo)
			uhi = &u
		}
		neg := natRange(ulo, uhi)
		alts = append(alts, `"-" (`+strings.Join(neg, " | ")+`)`)
	}
	return "(" + strings.Join(alts, " | ") + ")"
}

// natRange returns alternatives matching the naturals in [lo, hi] (hi nil: up to maxIntDigits
// digits).
func natRange(lo uint64, hi *uint64) []string {
	if hi == nil {
		ls := strconv.FormatUint(lo, 10)
		top := strings.Repeat("9", len(ls))
		t, _ := strconv.ParseUint(top, 10, 64)
		alts := natRange(lo, &t)
		if len(ls) < maxIntDigits {
			alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d,%d}", len(ls), maxIntDigits-1))
		}
		return alts
	}
	var alts []string
	ls, hs := strconv.FormatUint(lo, 10), strconv.FormatUint(*hi, 10)
	// Split at each change of the number of digits.
	for n := len(ls); n <= len(hs); n++ {
		a, b := ls, hs
		if n > len(ls) {
			a = "1" + strings.Repeat("0", n-1)
		}
		if n < len(hs) {
			b = strings.Repeat("9", n)
		}
		alts = append(alts, sameLen(a, b)...)
	}
	return alts
}

// sameLen returns alternatives matching the digit strings of length len(a) in [a, b] (leading
// zeros allowed after the first position, as the recursion needs).
func sameLen(a, b string) []string {
	if len(a) == 1 {
		return []string{digits(a[0], b[0])}
	}
	if a[0] == b[0] {
		var out []string
		for _, s := range sameLen(a[1:], b[1:]) {
			out = append(out, digits(a[0], a[0])+" "+s)
		}
		return out
	}
	rest := len(a) - 1
	lowAll, highAll := strings.Repeat("0", rest), strings.Repeat("9", rest)
	if a[1:] == lowAll && b[1:] == highAll {
		return []string{fmt.Sprintf("%s [0-9]{%d}", digits(a[0], b[0]), rest)}
	}
	var out []string
	first, last := a[0], b[0]
	if a[1:] != lowAll {
		for _, s := range sameLen(a[1:], highAll) {
			out = append(out, digits(a[0], a[0])+" "+s)
		}
		first++
	}
	if b[1:] != highAll {
		last--
	}
	if first <= last {
		out = append(out, fmt.Sprintf("%s [0-9]{%d}", digits(first, last), rest))
	}
	if b[1:] != highAll {
		for _, s := range sameLen(lowAll, b[1:]) {
			out = append(out, digits(b[0], b[0])+" "+s)
		}
	}
	return out
}

func digits(lo, hi byte) string {
	if lo == hi {
		return `"` + string(lo) + `"`
	}
	return "[" + string(lo) + "-" + string(hi) + "]"
}
