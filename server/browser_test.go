package server

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package puts the browser (.ci/run installs it in CI).
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for the test and returns a tab's context. Without Chromium
// the test skips, or fails under CI, where it must run.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing (%v): install the Debian package chromium", chromiumPath, err)
		}
		t.Skipf("%s is missing: install the Debian package chromium to run the browser test", chromiumPath)
	}
	var log bytes.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // CI containers run as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(&log),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%s", log.String())
		}
	})
	return ctx
}

// replyDone is true once the newest assistant reply has finished streaming.
const replyDone = `(() => { const r = document.querySelector('[data-testid="reply"]'); return !!r && r.closest('.msg').dataset.done === "true"; })()`

// TestBrowser loads the page in headless Chromium against a real server: ?q= sends the first
// message on load, the reply streams in, the live view shows the steps and the finished request,
// a second message goes through the form, and a screenshot of the page is not blank.
//
// It drives Chromium over the DevTools protocol (chromedp) rather than with --dump-dom
// --virtual-time-budget: that waits for the chat's streamed fetch, but not for the live feed's
// later events (sent on the server's real-time poll ticks), so the dumped DOM shows no steps.
func TestBrowser(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	ctx := browser(t) // after newEnv: cleanups run last first, so the browser closes its streams before the server closes
	text := func(sel string) string { return textOf(t, ctx, sel) }

	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(e.ts.URL+"/?q=Once%20upon%20a%20time"),
		chromedp.Poll[chromedp.Void](replyDone, chromedp.WithPollingTimeout(30*time.Second)),
	); err != nil {
		t.Fatalf("waiting for the streamed reply: %v", err)
	}
	if errs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#messages .msg.error').length`)); err != nil || errs > 0 {
		t.Fatalf("the chat shows an error: %q (%v)", text(`#messages`), err)
	}
	reply := text(`[data-testid="reply"]`)
	if reply == "" {
		t.Fatal("the reply is empty")
	}
	t.Logf("reply: %q (%s)", reply, text(`#messages .msg:last-child .meta`))

	// The live view catches up within a poll interval or two.
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](
		`+document.querySelector('[data-testid="step-count"]').textContent > 0 && document.querySelectorAll('[data-testid="req-rows"] tr').length === 1`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("waiting for the live view to show the request: %v", err)
	}
	snap := e.srv.cfg.Live.Snapshot()
	steps, _ := strconv.Atoi(text(`[data-testid="step-count"]`))
	if steps <= 0 || uint64(steps) > snap.Counts.Steps {
		t.Errorf("the page shows %d steps, the engine took %d", steps, snap.Counts.Steps)
	}
	if got, want := text(`[data-testid="req-rows"] tr td:nth-child(4)`), strconv.Itoa(snap.Requests[0].Completion); got != want {
		t.Errorf("the page shows %s completion tokens, the engine generated %s", got, want)
	}
	if bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#chart .bar').length`)); err != nil || bars == 0 {
		t.Errorf("step chart has %d bars (%v)", bars, err)
	}

	// A second message typed into the form.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#input`), "The little dog"),
		chromedp.Click(chromedp.CSS(`#send`)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#messages .msg.user').length === 2 && `+replyDone, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('[data-testid="req-rows"] tr').length === 2`, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("second message: %v", err)
	}
	if text(`[data-testid="reply"]`) == "" {
		t.Error("the second reply is empty")
	}

	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "page.png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("UBATCH_KEEP_SCREENSHOT"); keep != "" { // for a look at it, or a CI artifact
		if err := os.WriteFile(keep, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %v, want 1280x900", b)
	}
	if n := colours(img); n < 16 {
		t.Errorf("screenshot %s has %d distinct colours: blank?", path, n)
	} else {
		t.Logf("screenshot %s: %d distinct colours", path, n)
	}
}

// TestBrowserAPIKey: on a server with an API key the page loads without it, the live view and a
// chat say 401, and once the key is typed in the live view connects and a chat goes through
// without the failed turn in its history.
func TestBrowserAPIKey(t *testing.T) {
	e := newEnv(t, envOptions{live: true, apiKey: "sekrit"})
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.ts.URL+"/?q=Once%20upon%20a%20time"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#messages .msg.error')?.textContent.includes("401")`,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid="live-state"]').textContent.startsWith("401")`,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.SendKeys(chromedp.CSS(`#key`), "sekrit"),
		chromedp.Blur(chromedp.CSS(`#key`)), // the key takes effect on change
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid="live-state"]').textContent === "live"`,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.SendKeys(chromedp.CSS(`#input`), "Once upon a time"),
		chromedp.Click(chromedp.CSS(`#send`)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#messages .msg.user').length === 2 && `+replyDone,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('[data-testid="req-rows"] tr').length === 1`,
			chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("live view state %q, messages %q: %v", textOf(t, ctx, `[data-testid="live-state"]`), textOf(t, ctx, `#messages`), err)
	}
	if errs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#messages .msg.error').length`)); err != nil || errs != 1 {
		t.Fatalf("%d errors in the chat, want the one before the key (%v): %q", errs, err, textOf(t, ctx, `#messages`))
	}
	if textOf(t, ctx, `[data-testid="reply"]`) == "" {
		t.Fatal("the reply is empty")
	}
	// The chat's prompt is that of the one message alone: the failed turn is not in it.
	resp := e.post(context.Background(), "/v1/chat/completions", map[string]any{"max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}}}, "Authorization", "Bearer sekrit")
	defer resp.Body.Close()
	var res struct {
		Usage usageJSON `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if got := e.srv.cfg.Live.Snapshot().Requests[0].Prompt; got != res.Usage.PromptTokens {
		t.Errorf("the chat's prompt has %d tokens, one user message has %d", got, res.Usage.PromptTokens)
	}
}

// TestBrowserStop: the Stop button aborts a streaming reply; the server sees the client go away
// and the live view lists the request as cancelled.
func TestBrowserStop(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	ctx := browser(t)
	// Click Stop as soon as the first token shows, from inside the page: a long reply from this
	// tiny model takes a few hundred milliseconds, too short to time a click from here.
	const clickOnFirstToken = `new MutationObserver((_, obs) => {
		const r = document.querySelector('[data-testid="reply"]');
		if (r && r.textContent) { obs.disconnect(); document.getElementById('stop-btn').click(); }
	}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true})`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.ts.URL+"/"),
		chromedp.SetValue(chromedp.CSS(`#max_tokens`), "500"),
		chromedp.SetValue(chromedp.CSS(`#temperature`), "0"),
		chromedp.Evaluate[chromedp.Void](clickOnFirstToken),
		chromedp.SendKeys(chromedp.CSS(`#input`), "Once upon a time"),
		chromedp.Click(chromedp.CSS(`#send`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#messages .msg.assistant .meta') !== null`, chromedp.WithPollingTimeout(30*time.Second)),
	); err != nil {
		t.Fatal(err)
	}
	if meta := textOf(t, ctx, `#messages .msg.assistant .meta`); !strings.HasPrefix(meta, "stopped") {
		t.Fatalf("reply meta %q, want stopped (reply %q)", meta, textOf(t, ctx, `[data-testid="reply"]`))
	}
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](
		`document.querySelector('[data-testid="req-rows"] tr td:last-child')?.textContent === "cancelled"`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the live view does not show the request cancelled: %q (%v)", textOf(t, ctx, `[data-testid="req-rows"]`), err)
	}
	if snap := e.srv.cfg.Live.Snapshot(); len(snap.Requests) != 1 || snap.Requests[0].Completion >= 500 {
		t.Errorf("engine's requests %+v, want one cut short", snap.Requests)
	} else {
		t.Logf("stopped after %d tokens", snap.Requests[0].Completion)
	}
}

// textOf returns the trimmed text content of the first element sel selects.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// colours counts the distinct colours of img, up to 1000.
func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= 1000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
