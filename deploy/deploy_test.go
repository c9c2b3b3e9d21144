package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "test", "rules", "alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool did not report success:\n%s", out)
	}
}

func TestPrometheusConfig(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	if out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

func TestNginxConfig(t *testing.T) {
	nginx := tool(t, "nginx", "nginx")
	dir := t.TempDir()
	conf := renderNginx(t, dir, 18080, "127.0.0.1:18000")
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-c", conf, "-g", "pid "+filepath.Join(dir, "nginx.pid")+";").CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

// panelExprs returns every query of the dashboard, by panel title.
func panelExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.UID == "" {
		t.Fatal("the dashboard has no uid")
	}
	out := map[string][]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Fatalf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Fatalf("panel %q has an empty query", p.Title)
			}
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

// TestDashboardCoversTheKPIs checks the dashboard's shape; the e2e test evaluates its queries.
func TestDashboardCoversTheKPIs(t *testing.T) {
	all := ""
	for _, es := range panelExprs(t) {
		all += strings.Join(es, "\n")
	}
	for _, m := range []string{"ubatch_batch_utilization_ratio", "ubatch_prefix_cache_hit_tokens_total",
		"ubatch_time_per_output_token_seconds", "ubatch_queue_wait_seconds", "ubatch_sequences_waiting",
		"ubatch_time_to_first_token_seconds", "ubatch_inter_token_latency_seconds", "ubatch_route_decisions_total"} {
		if !strings.Contains(all, m) {
			t.Errorf("no panel queries %s", m)
		}
	}
}

// renderNginx writes deploy/nginx.conf for a test into dir: listening on port, proxying to
// router, with temporary files under dir. It returns the file's path.
func renderNginx(t *testing.T, dir string, port int, router string) string {
	t.Helper()
	b, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range []struct{ old, new string }{
		{"server 127.0.0.1:8000;", "server " + router + ";"},
		{"listen 8088;", "listen 127.0.0.1:" + strconv.Itoa(port) + ";"},
		{"http {", "http {\n" + tempPaths(dir)},
	} {
		if strings.Count(s, r.old) != 1 {
			t.Fatalf("nginx.conf: %q should occur once (the test rewrites it)", r.old)
		}
		s = strings.Replace(s, r.old, r.new, 1)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func tempPaths(dir string) string {
	var b strings.Builder
	for _, k := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		b.WriteString("    " + k + "_temp_path " + filepath.Join(dir, k) + ";\n")
	}
	return b.String()
}
