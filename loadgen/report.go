package loadgen

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteText writes r as a human-readable report: counts, throughput, and one
// row of latency percentiles per metric; the per-kind TTFT rows appear only
// when both kinds have samples.
// Write errors are ignored: it is meant for a terminal or a buffer.
func (r Result) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "requests\t%d\t(%d ok, %d errors, %d rejected)\n",
		r.Requests, r.Requests-r.Errors-r.Rejected, r.Errors, r.Rejected)
	fmt.Fprintf(tw, "duration\t%s\t\n", formatDuration(r.Duration))
	fmt.Fprintf(tw, "output tokens\t%d\t(%.1f tok/s)\n", r.OutputTokens, r.OutputTokensPerSec)
	if r.PromptTokens > 0 {
		fmt.Fprintf(tw, "prefix hit rate\t%.3f\t(%d of %d prompt tokens cached)\n", r.PrefixHitRate, r.CachedTokens, r.PromptTokens)
	}
	if r.FollowUpPromptTokens > 0 {
		fmt.Fprintf(tw, "turns 2+ cached\t%.3f\t(%d of %d prompt tokens)\n",
			float64(r.FollowUpCachedTokens)/float64(r.FollowUpPromptTokens), r.FollowUpCachedTokens, r.FollowUpPromptTokens)
	}
	tw.Flush()
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", r.FirstError)
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\tn\tp50\tp90\tp99\tmean\tmax\t")
	rows := []struct {
		name string
		p    Percentiles
	}{
		{"TTFT", r.TTFT},
		{"TTFT short", r.TTFTShort},
		{"TTFT long", r.TTFTLong},
		{"TTFT turn 2+", r.TTFTFollowUp},
		{"inter-token", r.InterToken},
	}
	for i, row := range rows {
		// The per-kind rows only add information when both kinds ran; chat follow-ups only
		// with a chat workload.
		if (i == 1 || i == 2) && (r.TTFTShort.N == 0 || r.TTFTLong.N == 0) || i == 3 && r.TTFTFollowUp.N == 0 {
			continue
		}
		p := row.p
		if p.N == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t-\t\n", row.name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", row.name, p.N,
			formatDuration(p.P50), formatDuration(p.P90), formatDuration(p.P99),
			formatDuration(p.Mean), formatDuration(p.Max))
	}
	tw.Flush()
}

// formatDuration prints latencies the way the perf README does ("0.95 s",
// "80 ms"): seconds with two decimals from 200 ms up, milliseconds below.
func formatDuration(d time.Duration) string {
	switch {
	case d >= 200*time.Millisecond:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
}
