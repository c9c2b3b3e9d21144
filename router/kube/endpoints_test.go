package kube

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

// slice is an EndpointSlice of the given address type and ports with these endpoints.
func slice(name string, typ discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: typ, Ports: ports, Endpoints: eps}
}

func ep(addr string, c discoveryv1.EndpointConditions) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: c}
}

func TestNodeURLs(t *testing.T) {
	http8080 := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}}
	two := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}, {Name: ptr("grpc"), Port: ptr(int32(9002))}}
	ready := discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	tests := []struct {
		name     string
		slices   []*discoveryv1.EndpointSlice
		port     string
		want     []string
		skipped  []string // substrings of the notes, in order
		wantNone bool
	}{
		{name: "ready endpoints, sorted", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.2", ready), ep("10.0.0.1", ready))},
			want: []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080"}},
		{name: "unset conditions count as ready", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.1", discoveryv1.EndpointConditions{}))},
			want: []string{"http://10.0.0.1:8080"}},
		{name: "not ready, not serving, terminating", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, http8080,
				ep("10.0.0.1", discoveryv1.EndpointConditions{Ready: ptr(false)}),
				ep("10.0.0.2", discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(false)}),
				ep("10.0.0.3", discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(true)}),
				ep("10.0.0.4", ready))},
			want: []string{"http://10.0.0.4:8080"}},
		{name: "duplicates across slices once", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.1", ready)),
			slice("b", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.1", ready))},
			want: []string{"http://10.0.0.1:8080"}},
		{name: "IPv6 in brackets", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv6, http8080, ep("fd00::1", ready))},
			want: []string{"http://[fd00::1]:8080"}},
		{name: "port by name", port: "grpc", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, two, ep("10.0.0.1", ready))},
			want: []string{"http://10.0.0.1:9002"}},
		{name: "several ports and no name", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, two, ep("10.0.0.1", ready))},
			skipped: []string{"a: several ports"}, wantNone: true},
		{name: "no port of that name", port: "metrics", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, two, ep("10.0.0.1", ready))},
			skipped: []string{`a: no port named "metrics"`}, wantNone: true},
		{name: "no ports", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, nil, ep("10.0.0.1", ready))},
			skipped: []string{"a: no port"}, wantNone: true},
		{name: "UDP", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)}}, ep("10.0.0.1", ready))},
			skipped: []string{"a: port protocol UDP"}, wantNone: true},
		{name: "FQDN slices are skipped, others kept", slices: []*discoveryv1.EndpointSlice{
			slice("f", discoveryv1.AddressTypeFQDN, http8080, ep("node.example", ready)),
			slice("a", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.1", ready))},
			want: []string{"http://10.0.0.1:8080"}, skipped: []string{"f: address type FQDN"}},
		{name: "an address that is no IP", slices: []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeIPv4, http8080, ep("10.0.0.1:80", ready), discoveryv1.Endpoint{Conditions: ready})},
			wantNone: true},
		{name: "nothing", wantNone: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := NodeURLs(tc.slices, tc.port)
			if tc.wantNone && len(got) != 0 || !tc.wantNone && !slices.Equal(got, tc.want) {
				t.Errorf("urls %q, want %q", got, tc.want)
			}
			if len(skipped) != len(tc.skipped) {
				t.Fatalf("skipped %q, want %q", skipped, tc.skipped)
			}
			for i, s := range tc.skipped {
				if !strings.Contains(skipped[i], s) {
					t.Errorf("skipped[%d] %q, want it to say %q", i, skipped[i], s)
				}
			}
		})
	}
}

func TestParseService(t *testing.T) {
	tests := []struct {
		name, spec string
		want       Service
		err        string
	}{
		{name: "namespace and name", spec: "ml/ubatch-node", want: Service{Namespace: "ml", Name: "ubatch-node"}},
		{name: "with port name", spec: "ml/ubatch-node:http", want: Service{Namespace: "ml", Name: "ubatch-node", Port: "http"}},
		{name: "no namespace", spec: "ubatch-node", err: "no namespace"},
		{name: "empty name", spec: "ml/", err: "name"},
		{name: "upper case", spec: "ML/node", err: "namespace"},
		{name: "empty port name", spec: "ml/node:", err: "port name"},
		{name: "numeric port", spec: "ml/node:8080", err: "port name"},
		{name: "a path", spec: "ml/node/x", err: "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseService(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "NAMESPACE/NAME[:PORTNAME]") {
					t.Fatalf("error %v, want one about %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%+v, %v; want %+v", got, err, tc.want)
			}
			if got.String() != tc.spec {
				t.Errorf("String %q, want %q", got.String(), tc.spec)
			}
		})
	}
}
