// Package kube is `ubatch route --kube-service`: the fleet's nodes discovered from a
// Kubernetes Service's EndpointSlices (those labelled kubernetes.io/service-name=NAME in its
// namespace), watched through the API server with client-go. Every ready endpoint is a node at
// http://ADDRESS:PORT (see NodeURLs); Watcher is a router.Discovery, so nodes join and leave the
// router as the slices change, with no restart and no configuration change.
//
// The router's ServiceAccount needs get, list and watch on endpointslices (discovery.k8s.io) in
// the Service's namespace (the chart's Role). Outside a cluster, or in tests, a kubeconfig
// file gives the API server and credentials instead of the pod's in-cluster config.
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Service names the Service whose endpoints are the nodes: NAMESPACE/NAME[:PORTNAME].
type Service struct {
	Namespace, Name string
	Port            string // the Service port's name; "" = the slices' only port
}

func (s Service) String() string {
	if s.Port == "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Namespace + "/" + s.Name + ":" + s.Port
}

// ParseService parses NAMESPACE/NAME[:PORTNAME], each part a DNS label as Kubernetes names
// Services and their ports.
func ParseService(spec string) (Service, error) {
	bad := func(why string) (Service, error) {
		return Service{}, fmt.Errorf("--kube-service %q: %s: want NAMESPACE/NAME[:PORTNAME]", spec, why)
	}
	ns, rest, ok := strings.Cut(spec, "/")
	if !ok {
		return bad("no namespace")
	}
	name, port, _ := strings.Cut(rest, ":")
	s := Service{Namespace: ns, Name: name, Port: port}
	for _, part := range []struct{ what, v string }{{"namespace", ns}, {"name", name}} {
		if errs := validation.IsDNS1123Label(part.v); len(errs) > 0 {
			return bad(fmt.Sprintf("%s %q: %s", part.what, part.v, errs[0]))
		}
	}
	if strings.Contains(rest, ":") {
		if errs := validation.IsValidPortName(port); len(errs) > 0 {
			return bad(fmt.Sprintf("port name %q: %s", port, errs[0]))
		}
	}
	return s, nil
}

// Config configures a Watcher.
type Config struct {
	Service Service
	// Kubeconfig is a kubeconfig file (its current context); "" = the in-cluster config of the
	// pod's ServiceAccount.
	Kubeconfig string
	Logger     *slog.Logger // nil = slog.Default(); client-go's own logs go to it too
	// Timeout bounds New's first list of the slices (default 10 s).
	Timeout time.Duration
}

// Watcher watches one Service's EndpointSlices. Create it with New; it is a router.Discovery.
type Watcher struct {
	svc    Service
	client rest.Interface // discovery.k8s.io/v1
	log    *slog.Logger

	mu      sync.Mutex // serializes publish, so that set is never called concurrently
	synced  bool       // the informer's first list is in the store: sets are whole
	last    []string   // the URLs last given to set (nil before the first)
	skipped []string   // the notes of NodeURLs last logged
}

// New connects to the API server and lists the Service's EndpointSlices once, so that bad
// credentials, a missing RBAC permission or an unreachable server are an error at start rather
// than a fleet that stays empty. A Service with no slices (yet) is not an error.
func New(ctx context.Context, cfg Config) (*Watcher, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "kube", "service", cfg.Service.String())
	// client-go logs through klog (watch errors, retries): into the router's log, not stderr.
	klog.SetSlogLogger(log)
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("--kube-service: not in a cluster (%w): give --kubeconfig", err)
	}
	client, err := restClient(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	w := &Watcher{svc: cfg.Service, client: client, log: log}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var list discoveryv1.EndpointSliceList
	opts := w.listOptions()
	err = client.Get().Namespace(w.svc.Namespace).Resource("endpointslices").
		VersionedParams(&opts, metav1.ParameterCodec).Do(lctx).Into(&list)
	if err != nil {
		hint := ""
		switch {
		case apierrors.IsForbidden(err):
			hint = fmt.Sprintf(" (the router's ServiceAccount needs get, list and watch on endpointslices in namespace %s: the chart's Role)", w.svc.Namespace)
		case apierrors.IsUnauthorized(err):
			hint = " (the API server refused the credentials)"
		}
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s at %s%s: %w", w.svc, rc.Host, hint, err)
	}
	urls, _ := NodeURLs(ptrs(list.Items), w.svc.Port)
	log.Info("watching the Service's endpoints", "api_server", rc.Host, "slices", len(list.Items), "ready_endpoints", len(urls))
	return w, nil
}

// restClient is a REST client of discovery.k8s.io/v1 alone. client-go's typed clients register
// every API group in their scheme, which would double the size of the ubatch binary; the
// informer needs only a client that gets EndpointSlices.
func restClient(rc *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := discoveryv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(rc)
	c.UserAgent = "ubatch-route"
	c.APIPath = "/apis"
	c.GroupVersion = &discoveryv1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return rest.RESTClientFor(c)
}

func (w *Watcher) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + w.svc.Name}
}

// Watch implements router.Discovery: an informer over the Service's EndpointSlices, set called
// with the ready endpoints' URLs after its first list and on every change of them. Lost watches
// are resumed by client-go (with backoff, logged); a deleted Service's slices go with it, and
// the fleet is then empty.
func (w *Watcher) Watch(ctx context.Context, set func(urls []string)) {
	lw := cache.NewFilteredListWatchFromClient(w.client, "endpointslices", w.svc.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = w.listOptions().LabelSelector })
	var store cache.Store
	changed := func(any) { w.publish(store, set) }
	logger := logr.FromSlogHandler(w.log.Handler())
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &logger,
		ListerWatcher: lw,
		ObjectType:    &discoveryv1.EndpointSlice{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, obj any) { changed(obj) },
			DeleteFunc: changed,
		},
	})
	done := make(chan struct{})
	go func() { defer close(done); ctrl.RunWithContext(klog.NewContext(ctx, logger)) }()
	if cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		w.mu.Lock()
		w.synced = true
		w.mu.Unlock()
		w.publish(store, set)
	}
	<-done
}

// publish gives set the store's ready endpoints when they differ from the last it gave.
func (w *Watcher) publish(store cache.Store, set func([]string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		return // the first list is still arriving: a partial set would drop nodes
	}
	var items []*discoveryv1.EndpointSlice
	for _, obj := range store.List() {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			items = append(items, s)
		}
	}
	urls, skipped := NodeURLs(items, w.svc.Port)
	if !slices.Equal(skipped, w.skipped) && len(skipped) > 0 {
		w.log.Warn("EndpointSlices skipped", "why", skipped)
	}
	w.skipped = skipped
	if w.last != nil && slices.Equal(urls, w.last) {
		return
	}
	w.last = append([]string{}, urls...)
	w.log.Debug("endpoints changed", "slices", len(items), "ready", urls)
	set(urls)
}

func ptrs(items []discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
