package hub

import (
	"fmt"
	"io"
	"strings"
)

// ProgressPrinter returns an Options.Progress callback that redraws one terminal line on w:
// "label [#####-----]  12.3 / 45.6 MiB  27%", or "label  12.3 MiB" when the total is unknown.
// The line ends with a newline once done reaches a known total. The callback is meant for one
// download at a time and is not safe for concurrent use.
func ProgressPrinter(w io.Writer, label string) func(done, total int64) {
	const width = 30
	const mib = 1 << 20
	finished := false
	return func(done, total int64) {
		if finished {
			return
		}
		if total <= 0 {
			fmt.Fprintf(w, "\r%s %7.1f MiB ", label, float64(done)/mib)
			return
		}
		frac := min(max(float64(done)/float64(total), 0), 1)
		filled := int(frac * width)
		bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
		fmt.Fprintf(w, "\r%s [%s] %7.1f / %.1f MiB %3d%% ", label, bar,
			float64(done)/mib, float64(total)/mib, int(frac*100))
		if done >= total {
			finished = true
			fmt.Fprintln(w)
		}
	}
}
