package deploy

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// adapterRule is the part of a prometheus-adapter rule the test reads.
type adapterRule struct {
	SeriesQuery string `yaml:"seriesQuery"`
	Name        struct {
		Matches string `yaml:"matches"`
		As      string `yaml:"as"`
	} `yaml:"name"`
}

// TestHelmAutoscaling: autoscaling.enabled renders an HPA on the node StatefulSet (which then
// leaves replicas to it) whose metric is one the chart's prometheus-adapter rules serve, from a
// series a real node exports; off, neither the HPA nor the rules render and replicas hold.
func TestHelmAutoscaling(t *testing.T) {
	helm := helmBin(t)
	off := render(t, helm)
	if off["HorizontalPodAutoscaler/rel-ubatch-node"] != nil || off["ConfigMap/rel-ubatch-prometheus-adapter-rules"] != nil {
		t.Error("an HPA or adapter rules rendered with autoscaling off")
	}
	if r, _ := off["StatefulSet/rel-ubatch-node"].get("spec", "replicas").(int); r != 2 {
		t.Errorf("replicas %v with autoscaling off, want node.replicas 2", off["StatefulSet/rel-ubatch-node"].get("spec", "replicas"))
	}

	on := render(t, helm, "--set", "autoscaling.enabled=true", "--set", "autoscaling.maxReplicas=5")
	hpa := on["HorizontalPodAutoscaler/rel-ubatch-node"]
	if hpa == nil {
		t.Fatal("no HPA with autoscaling.enabled")
	}
	if on["StatefulSet/rel-ubatch-node"].get("spec", "replicas") != nil {
		t.Error("the StatefulSet sets replicas beside its HPA: every upgrade would undo the HPA's scaling")
	}
	if hpa.str("spec", "scaleTargetRef", "kind") != "StatefulSet" || hpa.str("spec", "scaleTargetRef", "name") != "rel-ubatch-node" {
		t.Errorf("HPA targets %v", hpa.get("spec", "scaleTargetRef"))
	}
	if m, _ := hpa.get("spec", "maxReplicas").(int); m != 5 {
		t.Errorf("maxReplicas %v, want 5", hpa.get("spec", "maxReplicas"))
	}
	metric := hpa.str("spec", "metrics", "0", "pods", "metric", "name")

	var rules []adapterRule
	if err := yaml.Unmarshal([]byte(on["ConfigMap/rel-ubatch-prometheus-adapter-rules"].str("data", "rules.yaml")), &rules); err != nil {
		t.Fatalf("the adapter rules ConfigMap: %v", err)
	}
	var series string
	for _, r := range rules {
		if r.Name.As == metric {
			series = strings.Trim(regexp.MustCompile(`^\^|\$$`).ReplaceAllString(r.Name.Matches, ""), " ")
			if !strings.HasPrefix(r.SeriesQuery, series+"{") {
				t.Errorf("rule for %s queries %q, not the series its name matches (%s)", metric, r.SeriesQuery, series)
			}
		}
	}
	if series == "" {
		t.Fatalf("the HPA's metric %q is served by no adapter rule (%d rules)", metric, len(rules))
	}

	n := startNode(t, "hpa", "")
	waitHTTP(t, n.p, n.url+"/health", "ok", 60*time.Second)
	resp, err := http.Get(n.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, r := range rules {
		name := strings.Trim(regexp.MustCompile(`^\^|\$$`).ReplaceAllString(r.Name.Matches, ""), " ")
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{`).Match(body) {
			t.Errorf("a node's /metrics has no series %s (adapter rule %s)", name, r.Name.As)
		}
	}
}

// TestHelmExtProc: router.extProc.enabled makes the routers an endpoint picker (the flag
// `ubatch route -h` lists, a gRPC port on their Service and NetworkPolicy), the nodes
// advertise their pod IP, and with the InferencePool CRD the chart renders the pool of the
// node pods with the router Service's gRPC port as its picker.
func TestHelmExtProc(t *testing.T) {
	helm := helmBin(t)
	if objs := render(t, helm, "--set", "router.extProc.enabled=true"); objs["InferencePool/rel-ubatch"] != nil {
		t.Error("an InferencePool rendered without its CRD")
	}
	objs := render(t, helm, "--set", "router.extProc.enabled=true", "--api-versions", "inference.networking.k8s.io/v1/InferencePool")
	pool := objs["InferencePool/rel-ubatch"]
	if pool == nil {
		t.Fatal("no InferencePool with the CRD present")
	}
	router := object(objs["Deployment/rel-ubatch-router"].get("spec", "template", "spec", "containers", "0").(map[string]any))
	rargs := strs(router.get("args"))
	if !slices.Contains(rargs, "--ext-proc-port=9002") {
		t.Errorf("router args %q: no --ext-proc-port", rargs)
	}
	checkFlagsExist(t, "route", rargs[1:])
	svcPort := map[string]int{}
	for _, p := range objs["Service/rel-ubatch-router"].get("spec", "ports").([]any) {
		po := object(p.(map[string]any))
		n, _ := po.get("port").(int)
		svcPort[po.str("name")] = n
	}
	if pool.str("spec", "endpointPickerRef", "name") != "rel-ubatch-router" || pool.get("spec", "endpointPickerRef", "port", "number") != svcPort["grpc"] || svcPort["grpc"] == 0 {
		t.Errorf("picker ref %v, router Service ports %v", pool.get("spec", "endpointPickerRef"), svcPort)
	}
	sts := objs["StatefulSet/rel-ubatch-node"]
	podLabels := sts.get("spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range pool.get("spec", "selector", "matchLabels").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("pool selector %s=%v does not select the node pods (%v)", k, v, podLabels[k])
		}
	}
	if pool.get("spec", "targetPorts", "0", "number") != 8080 {
		t.Errorf("pool target port %v, want the nodes' 8080", pool.get("spec", "targetPorts"))
	}
	node := object(sts.get("spec", "template", "spec", "containers", "0").(map[string]any))
	if !slices.Contains(strs(node.get("args")), "--advertise-url=http://$(POD_IP):8080") || !strings.Contains(fmt.Sprint(node.get("env")), "status.podIP") {
		t.Errorf("nodes do not advertise their pod IP: %q", strs(node.get("args")))
	}
	var grpcOpen bool
	for _, p := range objs["NetworkPolicy/rel-ubatch-router"].get("spec", "ingress", "0", "ports").([]any) {
		grpcOpen = grpcOpen || object(p.(map[string]any)).str("port") == "grpc"
	}
	if !grpcOpen {
		t.Error("the router NetworkPolicy does not admit the gateway on the gRPC port")
	}
}
