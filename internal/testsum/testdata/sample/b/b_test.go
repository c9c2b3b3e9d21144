package b

import "testing"

func TestBroken(t *testing.T) { undefined() }
