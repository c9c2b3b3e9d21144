package kube

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// grantRouter gives the router's user in ns what the chart's Role grants its ServiceAccount
// (deploy/helm/ubatch/templates/router-rbac.yaml): get, list and watch on endpointslices.
func (c *controlPlane) grantRouter(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ubatch-router"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := c.rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ubatch-router"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ubatch-router"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "router"}}}
	if _, err := c.rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createService creates a Service without a selector (its slices are the tests'), port "http".
func (c *controlPlane) createService(t *testing.T, ns, name string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}}}
	if _, err := c.core.Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// endpointSlice is a slice of Service svc with port "http" = port and one endpoint per
// address, ready or not.
func endpointSlice(name, svc string, port int32, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false)}})
	}
	return s
}

func (c *controlPlane) createSlice(t *testing.T, ns string, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := c.discovery.EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setReady marks every endpoint of slice name ready or not.
func (c *controlPlane) setReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	ctx := context.Background()
	s, err := c.discovery.EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Endpoints {
		s.Endpoints[i].Conditions.Ready, s.Endpoints[i].Conditions.Serving = ptr(ready), ptr(ready)
	}
	if _, err := c.discovery.EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *controlPlane) deleteSlice(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.discovery.EndpointSlices(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deleteSlices deletes every slice of Service svc.
func (c *controlPlane) deleteSlices(t *testing.T, ns, svc string) {
	t.Helper()
	err := c.discovery.EndpointSlices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatcher runs the Watcher in the test's process (so -race sees it) against the real API
// server, with the router's RBAC.
func TestWatcher(t *testing.T) {
	c := sharedControlPlane(t)
	ns := c.namespace(t, "watch")
	denied := c.namespace(t, "denied")
	c.grantRouter(t, ns)
	c.createService(t, ns, "nodes")
	// Endpoints of another Service and a slice of the same name's in another namespace are
	// not this Service's.
	c.createSlice(t, ns, endpointSlice("other", "other", 9000, true, "10.0.9.1"))
	c.createSlice(t, ns, endpointSlice("a", "nodes", 8080, true, "10.0.0.1"))
	c.createSlice(t, denied, endpointSlice("a", "nodes", 8080, true, "10.0.8.1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("no permission", func(t *testing.T) {
		_, err := New(ctx, Config{Service: Service{Namespace: denied, Name: "nodes"}, Kubeconfig: c.router})
		if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "needs get, list and watch on endpointslices in namespace denied") {
			t.Fatalf("New without the Role: %v", err)
		}
	})
	t.Run("bad token", func(t *testing.T) {
		bad := c.dir + "/bad.kubeconfig"
		if err := writeKubeconfig(bad, c.url, "nobody", "not-a-token"); err != nil {
			t.Fatal(err)
		}
		if _, err := New(ctx, Config{Service: Service{Namespace: ns, Name: "nodes"}, Kubeconfig: bad}); err == nil ||
			!strings.Contains(err.Error(), "refused the credentials") {
			t.Fatalf("New with a bad token: %v", err)
		}
	})
	t.Run("bad kubeconfig", func(t *testing.T) {
		if _, err := New(ctx, Config{Service: Service{Namespace: ns, Name: "nodes"}, Kubeconfig: c.dir + "/none.kubeconfig"}); err == nil ||
			!strings.Contains(err.Error(), "--kubeconfig") {
			t.Fatalf("New with a missing kubeconfig: %v", err)
		}
	})

	w, err := New(ctx, Config{Service: Service{Namespace: ns, Name: "nodes", Port: "http"}, Kubeconfig: c.router, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan []string, 16)
	done := make(chan struct{})
	go func() { defer close(done); w.Watch(ctx, func(urls []string) { sets <- urls }) }()
	next := func(what string, want ...string) {
		t.Helper()
		select {
		case got := <-sets:
			if !slices.Equal(got, want) {
				t.Fatalf("%s: set %q, want %q", what, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no set within 10 s (want %q)", what, want)
		}
	}
	next("first list", "http://10.0.0.1:8080")
	c.createSlice(t, ns, endpointSlice("b", "nodes", 8081, true, "10.0.0.2", "10.0.0.3"))
	next("slice b", "http://10.0.0.1:8080", "http://10.0.0.2:8081", "http://10.0.0.3:8081")
	c.setReady(t, ns, "a", false)
	next("a not ready", "http://10.0.0.2:8081", "http://10.0.0.3:8081")
	c.createSlice(t, ns, endpointSlice("c", "nodes", 8082, false, "10.0.0.4"))
	c.setReady(t, ns, "a", true) // slice c, not ready, changes no set: the next is a's
	next("a ready again", "http://10.0.0.1:8080", "http://10.0.0.2:8081", "http://10.0.0.3:8081")
	c.deleteSlice(t, ns, "b")
	next("b deleted", "http://10.0.0.1:8080")
	c.deleteSlices(t, ns, "nodes")
	next("every slice deleted")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}
