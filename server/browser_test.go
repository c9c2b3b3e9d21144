package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package puts the browser (.ci/run installs it in CI).
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium (with extra flags, if any) for the test and returns a tab's
// context. Without Chromium the test skips, or fails under CI, where it must run.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
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
	opts = append(opts, extra...)
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

// TestBrowser loads the page in headless Chromium against a real server that checks Host (as on a
// loopback bind): ?q= fills the message box and sends nothing, Send sends it, the reply streams
// in, the live view shows the steps and the finished request, a second message goes through the
// form, a screenshot of the page is not blank, and the console has shown no CSP violation.
//
// It drives Chromium over the DevTools protocol (chromedp) rather than with --dump-dom
// --virtual-time-budget: that waits for the chat's streamed fetch, but not for the live feed's
// later events (sent on the server's real-time poll ticks), so the dumped DOM shows no steps.
func TestBrowser(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	ts := e.guardedServer(t)
	ctx := browser(t) // after newEnv: cleanups run last first, so the browser closes its streams before the server closes
	text := func(sel string) string { return textOf(t, ctx, sel) }
	console := watchConsole(t, ctx)
	recordFetches(t, ctx)

	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(ts.URL+"/?q=Once%20upon%20a%20time"),
		chromedp.Poll[chromedp.Void](pageReady, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("waiting for the page: %v", err)
	}
	checkQueryNotSent(t, ctx, e, "Once upon a time")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#send`)),
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
	checkChartScale(t, ctx)

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
	console.checkCSP(t, ctx)
}

// TestBrowserAPIKey: on a server with an API key the page loads without it, the live view and a
// chat say 401, and once the key is typed in the live view connects and a chat goes through
// without the failed turn in its history.
func TestBrowserAPIKey(t *testing.T) {
	e := newEnv(t, envOptions{live: true, apiKey: "sekrit"})
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.URL+"/?q=Once%20upon%20a%20time"),
		chromedp.Click(chromedp.CSS(`#send`)),
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
	resp := e.Post(context.Background(), "/v1/chat/completions", map[string]any{"max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}}}, "Authorization", "Bearer sekrit")
	defer resp.Body.Close()
	var res struct {
		Usage UsageJSON `json:"usage"`
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
		chromedp.Navigate(e.URL+"/"),
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

// TestBrowserRebinding: Chromium resolving a foreign name to 127.0.0.1, as a DNS-rebinding page
// makes it, gets the server's 403 on a loopback bind, and the page itself once --allowed-hosts
// names that host.
func TestBrowserRebinding(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	tests := []struct {
		name    string
		allowed []string
		status  int64
		want    string // JavaScript that must hold on the page that loaded
	}{
		{name: "foreign Host refused", status: 403, want: `document.body.textContent.includes("host_not_allowed") && document.body.textContent.includes("--allowed-hosts evil.example")`},
		{name: "foreign Host allowed", allowed: []string{"evil.example"}, status: 200, want: `document.querySelector('[data-testid="live-state"]')?.textContent === "live"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := e.guardedServer(t, tc.allowed...)
			ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"),
				chromedp.Flag("disable-features", "HttpsUpgrades")) // keep http://evil.example on http
			_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
			resp, err := chromedp.Run(ctx, chromedp.NavigateResponse("http://evil.example:"+port+"/"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.status {
				t.Fatalf("status %d, want %d", resp.Status, tc.status)
			}
			if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](tc.want, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
				t.Fatalf("%s: %v; the page says %q", tc.want, err, textOf(t, ctx, "body"))
			}
		})
	}
}

// TestBrowserSDKPreflight: a page on another localhost origin calls the API with the headers of
// the official OpenAI SDK, whose preflight Chromium then passes; a header outside them still
// fails it (the browser, not only the server, enforces the list).
func TestBrowserSDKPreflight(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	api := e.guardedServer(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><title>another app</title>")
	}))
	t.Cleanup(origin.Close)
	ctx := browser(t)
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	if err := chromedp.Do(ctx, chromedp.Navigate("http://localhost:"+port+"/")); err != nil {
		t.Fatal(err)
	}
	sdk := map[string]string{"Authorization": "Bearer none", "Content-Type": "application/json",
		"X-Stainless-Lang": "js", "X-Stainless-Package-Version": "5.10.0", "X-Stainless-OS": "Linux",
		"X-Stainless-Arch": "x64", "X-Stainless-Runtime": "browser:chrome", "X-Stainless-Runtime-Version": "140.0.0",
		"X-Stainless-Retry-Count": "0", "X-Stainless-Timeout": "600",
		"OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1", "OpenAI-Beta": "assistants=v2"}
	withEvil := maps.Clone(sdk)
	withEvil["X-Evil"] = "1"
	tests := []struct {
		name    string
		headers map[string]string
		want    string // prefix of the outcome
	}{
		{name: "SDK headers", headers: sdk, want: "200 "},
		{name: "another header", headers: withEvil, want: "failed: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr, _ := json.Marshal(tc.headers)
			call := fmt.Sprintf(`(async () => {
				try {
					const r = await fetch(%q, {method: "POST", headers: %s,
						body: JSON.stringify({messages: [{role: "user", content: "Once"}], max_tokens: 1})});
					return r.status + " " + (await r.text());
				} catch (err) { return "failed: " + err.message; }
			})()`, api.URL+"/v1/chat/completions", hdr)
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](call, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("fetch from another origin: %.300s; want %q...", got, tc.want)
			}
		})
	}
}

// TestBrowserModels: on a server of two models the page's picker lists both from /v1/models
// (neither loaded yet); a conversation with the one picked goes to it (the reply names it, and
// only it is loaded), and picking the other starts a new conversation that goes to the other.
func TestBrowserModels(t *testing.T) {
	e := newMultiEnv(t, multiOptions{live: true, cfg: RegistryConfig{KeepAlive: -1}})
	ctx := browser(t)
	console := watchConsole(t, ctx)
	recordFetches(t, ctx)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.ts.URL+"/"),
		chromedp.Poll[chromedp.Void](pageReady+` && document.querySelectorAll('[data-testid="model-select"] option').length === 2`,
			chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("model").textContent + " | " + document.getElementById("live-state").textContent + " | " + document.getElementById("model-select").innerHTML`))
		t.Fatalf("waiting for the page and its model list: %v (page: %s)", err, state)
	}
	opts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="model-select"] option')].map((o) => o.value + "|" + o.textContent)`))
	if err != nil || fmt.Sprint(opts) != "[alpha|alpha (unloaded) beta|beta (unloaded)]" {
		t.Fatalf("the picker lists %q (%v), want alpha and beta, unloaded", opts, err)
	}
	for i, pick := range []string{"beta", "alpha"} {
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(`#model-select`), pick),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("model-select").dispatchEvent(new Event("change"))`),
			chromedp.Poll[chromedp.Void](`document.querySelectorAll('#messages .msg').length === 0`, chromedp.WithPollingTimeout(5*time.Second)),
			chromedp.SendKeys(chromedp.CSS(`#input`), "Once upon a time"),
			chromedp.Click(chromedp.CSS(`#send`)),
			chromedp.Poll[chromedp.Void](replyDone, chromedp.WithPollingTimeout(30*time.Second)),
		); err != nil {
			t.Fatalf("a conversation with %s: %v", pick, err)
		}
		if meta := textOf(t, ctx, `#messages .msg:last-child .meta`); !strings.HasSuffix(meta, " · "+pick) {
			t.Errorf("the reply's line says %q, want it to name %s", meta, pick)
		}
		if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#messages .msg.user').length`)); err != nil || n != 1 {
			t.Errorf("%d user messages in the conversation with %s (%v), want 1: a new pick starts a new conversation", n, pick, err)
		}
		want := []string{"beta"}
		if i == 1 {
			want = []string{"alpha", "beta"}
		}
		if got := e.psNames(t); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after the conversation with %s the server has %v loaded, want %v", pick, got, want)
		}
	}
	console.checkCSP(t, ctx)
}

// pageReady is true once the page's start-up has run: the model named and the live feed on.
const pageReady = `document.querySelector('[data-testid="model"]').textContent !== "" && document.querySelector('[data-testid="live-state"]').textContent === "live"`

// pageProbe runs in every document before the page's script: it records the URL of each fetch
// call (when it is made, not when it ends, as a streamed reply may not) in __fetches, and each
// CSP violation in __csp.
const pageProbe = `(() => {
	window.__fetches = [];
	const f = window.fetch;
	window.fetch = function (input, init) {
		window.__fetches.push(new URL(input instanceof Request ? input.url : String(input), location.href).pathname);
		return f.apply(this, arguments);
	};
	window.__csp = [];
	document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.effectiveDirective + " blocked " + (e.blockedURI || "?")), true);
})()`

// recordFetches installs pageProbe in the tab of ctx, for the documents it loads from now on.
func recordFetches(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pageProbe}); err != nil {
		t.Fatal(err)
	}
}

// checkQueryNotSent checks a page loaded with ?q=q (and pageProbe) once it is ready: the message
// box holds q, and neither the page nor the engine has seen a chat request.
func checkQueryNotSent(t *testing.T, ctx context.Context, e *testEnv, q string) {
	t.Helper()
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("input").value`)); err != nil || got != q {
		t.Errorf("message box holds %q (%v), want ?q='s %q", got, err, q)
	}
	fetches, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__fetches`))
	if err != nil {
		t.Fatal(err)
	}
	// The probe must have seen the page's start-up calls, else it proves nothing.
	if !slices.Contains(fetches, "/v1/models") || !slices.Contains(fetches, "/live") || slices.Contains(fetches, "/v1/chat/completions") {
		t.Errorf("the page fetched %q on load; want /v1/models and /live, and no chat", fetches)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#messages .msg").length`)); err != nil || n != 0 {
		t.Errorf("%d messages in the chat on load (%v), want none", n, err)
	}
	if snap := e.srv.cfg.Live.Snapshot(); snap.Counts.Admitted != 0 || len(snap.Requests) != 0 {
		t.Errorf("the engine admitted %d requests on load, want none", snap.Counts.Admitted)
	}
}

// consoleWatch collects the console of a tab: calls, exceptions and the browser's own log, where
// Chromium reports CSP violations.
type consoleWatch struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

// watchConsole starts collecting the console of ctx's tab, until ctx ends.
func watchConsole(t *testing.T, ctx context.Context) *consoleWatch {
	t.Helper()
	c := &consoleWatch{}
	msgs := chromedp.Console(ctx) // subscribes now, before any page loads
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

// csp returns the messages about the Content Security Policy seen so far.
func (c *consoleWatch) csp() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if strings.Contains(m.Text, "Content Security Policy") {
			out = append(out, m.String())
		}
	}
	return out
}

// checkCSP fails the test if the page (loaded with pageProbe) or the console has reported a CSP
// violation. Then it makes the page break its policy on purpose, an inline script and an inline
// style, and checks that both are blocked and seen: else the check above is blind.
func (c *consoleWatch) checkCSP(t *testing.T, ctx context.Context) {
	t.Helper()
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__csp`))
	if err != nil {
		t.Fatal(err)
	}
	if len(violations) > 0 || len(c.csp()) > 0 {
		t.Errorf("CSP violations: page %q, console %q", violations, c.csp())
	}
	const breakPolicy = `(() => {
		const s = document.createElement("script");
		s.textContent = "window.__inlineRan = true";
		document.body.append(s);
		document.body.insertAdjacentHTML("beforeend", '<b id="inline-style" style="color: rgb(255, 0, 0)">x</b>');
	})()`
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](breakPolicy),
		chromedp.Poll[chromedp.Void](`window.__csp.length >= 2`, chromedp.WithPollingTimeout(5*time.Second)),
	); err != nil {
		t.Fatalf("breaking the policy on purpose reported no violations: %v", err)
	}
	blocked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__inlineRan !== true && getComputedStyle(document.getElementById("inline-style")).color !== "rgb(255, 0, 0)"`))
	if err != nil || !blocked {
		t.Errorf("an inline script or style was not blocked (%v)", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.csp()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := c.csp(); len(got) < 2 {
		t.Errorf("the console showed %q for two violations on purpose: the console check is blind", got)
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

// chartScale checks the step chart: each column's full height is the largest budget in view,
// so a step's decode and prompt tokens stand against what a step could carry (a step that used
// part of its budget is not drawn full), the scale says so in plural, and the legend explains
// every budget reason.
const chartScale = `(() => {
  const bars = [...document.querySelectorAll('#chart .bar')];
  const n = (b, k) => +b.dataset[k];
  const max = Math.max(...bars.map((b) => Math.max(n(b, 'budget'), n(b, 'decode') + n(b, 'prefill'))));
  const h = (b, c) => parseFloat(b.querySelector('.' + c).style.height);
  const off = bars.filter((b) => Math.abs(h(b, 'decode') - 100 * n(b, 'decode') / max) > 0.01 ||
    Math.abs(h(b, 'prefill') - 100 * n(b, 'prefill') / max) > 0.01 || Math.abs(h(b, 'budget') - 100 * n(b, 'budget') / max) > 0.01);
  const partial = bars.filter((b) => n(b, 'decode') + n(b, 'prefill') < n(b, 'budget'));
  const drawnFull = partial.filter((b) => h(b, 'decode') + h(b, 'prefill') >= 99.99);
  const dts = [...document.querySelectorAll('#reasons dt')].map((d) => d.textContent);
  return JSON.stringify({bars: bars.length, max, off: off.length, partial: partial.length, drawnFull: drawnFull.length,
    scale: document.getElementById('chart-scale').textContent, reasons: dts.join(' ')});
})()`

func checkChartScale(t *testing.T, ctx context.Context) {
	t.Helper()
	js, err := chromedp.Run(ctx, chromedp.Evaluate[string](chartScale))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Bars, Max, Off, Partial, DrawnFull int
		Scale, Reasons                     string
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	wantScale := fmt.Sprintf("full height: %d tokens, the largest budget in view", got.Max)
	if got.Max == 1 {
		wantScale = "full height: 1 token, the largest budget in view"
	}
	switch {
	case got.Bars == 0 || got.Off > 0:
		t.Errorf("%d of %d columns are not drawn against the largest budget (%d tokens): %s", got.Off, got.Bars, got.Max, js)
	case got.Partial == 0 || got.DrawnFull > 0:
		t.Errorf("of %d steps that used part of their budget, %d are drawn full: %s", got.Partial, got.DrawnFull, js)
	case got.Scale != wantScale:
		t.Errorf("the chart's scale says %q, want %q", got.Scale, wantScale)
	case got.Reasons != "no_decode fixed learning target queue floor batch_size":
		t.Errorf("the legend explains %q", got.Reasons)
	}
}
