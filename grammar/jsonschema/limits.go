package jsonschema

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"ubatch/grammar"
)

// maxName bounds the length of a rule name, so that names built from property names (each a
// prefix of its parent's) cost the output a constant per rule, not the key's length per level.
const maxName = 48

// limits are a conversion's bounds: grammar.Limits' MaxBytes and MaxRules on its output (the
// GBNF that grammar.Compile will read) and MaxTime on its wall time, defaults filled.
type limits struct {
	bytes, rules int
	deadline     time.Time
	maxTime      time.Duration
}

func newLimits(lim grammar.Limits) limits {
	l := limits{bytes: lim.MaxBytes, rules: lim.MaxRules, maxTime: lim.MaxTime}
	if l.bytes <= 0 {
		l.bytes = grammar.DefaultMaxBytes
	}
	if l.rules <= 0 {
		l.rules = grammar.DefaultMaxRules
	}
	if l.maxTime <= 0 {
		l.maxTime = grammar.DefaultMaxTime
	}
	l.deadline = time.Now().Add(l.maxTime)
	return l
}

// fail records the first error that ends the conversion; visit returns it from then on.
func (c *converter) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// tick checks the context and the deadline every 256 calls and returns the conversion's error.
func (c *converter) tick() error {
	if c.ticks++; c.ticks&255 == 0 && c.err == nil {
		if err := c.ctx.Err(); err != nil {
			c.fail(fmt.Errorf("json schema: conversion stopped: %w", err))
		} else if now := time.Now(); now.After(c.lim.deadline) {
			c.fail(grammar.TimeLimit(c.lim.maxTime, c.lim.maxTime+now.Sub(c.lim.deadline)))
		}
	}
	return c.err
}

// define sets rule name's body, counting the rule and the bytes it adds to the output.
func (c *converter) define(name, body string) {
	if _, ok := c.rules[name]; !ok {
		c.order = append(c.order, name)
		c.size += len(name) + len(" ::= \n")
		if len(c.order) > c.lim.rules {
			c.fail(&grammar.LimitError{Limit: grammar.LimitRules, Max: c.lim.rules, Got: len(c.order)})
		}
	}
	c.size += len(body) - len(c.rules[name])
	c.rules[name] = body
	if c.size > c.lim.bytes {
		c.fail(&grammar.LimitError{Limit: grammar.LimitBytes, Max: c.lim.bytes, Got: c.size})
	}
	c.tick()
}

// add defines a rule named after name (made unique) and returns its name. Unique names come from
// a counter per base name, so that many rules of one base (say, properties whose names have no
// ASCII letter) cost one lookup each rather than a scan of the names taken.
func (c *converter) add(name, body string) string {
	base := ruleBase(name)
	name = base
	if _, taken := c.rules[name]; taken {
		n := max(c.next[base], 1)
		for ; ; n++ {
			// A name can be skipped here only by its own base, once: the scan is linear overall.
			name = base + "-" + strconv.Itoa(n)
			if _, taken := c.rules[name]; !taken {
				break
			}
		}
		c.next[base] = n + 1
	}
	c.define(name, body)
	return name
}

// ruleBase is name as a GBNF rule name: runs of other characters than letters, digits and '-'
// become '-', at most maxName bytes, "r" when nothing is left.
func ruleBase(name string) string {
	name = clip(name, 4*maxName) // what follows costs the clipped length, not the key's
	name = strings.Trim(nonName.ReplaceAllString(name, "-"), "-")
	if len(name) > maxName {
		name = strings.TrimRight(name[:maxName], "-")
	}
	if name == "" {
		name = "r"
	}
	return name
}

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// pointerKey escapes a property name as a JSON pointer segment (RFC 6901), so that a '/' in a
// name neither breaks the pointer in an error nor counts as a level of nesting.
func pointerKey(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
