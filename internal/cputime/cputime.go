// Package cputime reads the CPU time of the process and of the calling thread. On a machine
// shared with other work, CPU time counts what the code computed, not how long it waited for a
// core, as wall time does.
package cputime
