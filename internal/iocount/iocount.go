// Package iocount wraps a reader or a writer to count the bytes that pass through it.
package iocount

import "io"

// Reader counts the bytes read from R in N.
type Reader struct {
	R io.Reader
	N int64
}

func (c *Reader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// Writer counts the bytes that reach W in N (what W accepted, also when it fails).
type Writer struct {
	W io.Writer
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
