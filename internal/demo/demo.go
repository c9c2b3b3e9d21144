// Package demo holds the demo model compiled into the binary: stories260K.gguf, a 1.1 MB Llama
// trained on TinyStories (Andrej Karpathy's llama2.c, MIT licence: see LICENSE beside it), so
// that `ubatch serve` and `ubatch run` work with no -m on a machine with no network and no
// downloaded model. The hub package writes it out to a file once (models are memory-mapped
// files everywhere else) and serves that file.
package demo

import _ "embed" // for go:embed

// Name is the demo model's file name.
const Name = "stories260K.gguf"

// SHA256 is the hex SHA-256 of GGUF, the file as llama.cpp's project published it.
const SHA256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"

// GGUF is the whole model file. A string, not a []byte, so that it stays in the binary's
// read-only data and cannot be changed by a caller.
//
//go:embed stories260K.gguf
var GGUF string
