package kube

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// NodeURLs is the set of node base URLs, http://ADDRESS:PORT sorted and without duplicates,
// of the ready endpoints in a Service's EndpointSlices, and a note for each slice it could not
// use (no matching port, an FQDN address type).
//
// port names the Service port to use (EndpointPort.Name); "" takes a slice's only port and
// skips a slice of several. An endpoint counts when it is ready (conditions.ready true or
// unset, as the API asks consumers to read unset), serving (false only while the pod is not
// Ready: with publishNotReadyAddresses, which the chart's headless Service sets, ready stays
// true and serving tells) and not terminating. Of its addresses the first is used, as the
// API allows (they are fungible).
func NodeURLs(eps []*discoveryv1.EndpointSlice, port string) (urls, skipped []string) {
	seen := map[string]bool{}
	for _, s := range eps {
		if s == nil {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			skipped = append(skipped, fmt.Sprintf("%s: address type %s: want IPv4 or IPv6", s.Name, s.AddressType))
			continue
		}
		p, why := slicePort(s.Ports, port)
		if why != "" {
			skipped = append(skipped, s.Name+": "+why)
			continue
		}
		for _, e := range s.Endpoints {
			if !usable(e.Conditions) || len(e.Addresses) == 0 || net.ParseIP(e.Addresses[0]) == nil {
				continue
			}
			u := "http://" + net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(p)))
			if !seen[u] {
				seen[u] = true
				urls = append(urls, u)
			}
		}
	}
	slices.Sort(urls)
	return urls, skipped
}

// slicePort is the port number of the slice's port named name ("" = its only port), or why
// there is none.
func slicePort(ports []discoveryv1.EndpointPort, name string) (int32, string) {
	var found *discoveryv1.EndpointPort
	for i := range ports {
		p := &ports[i]
		if name == "" || (p.Name != nil && *p.Name == name) {
			if found != nil {
				return 0, "several ports: name one (--kube-service NAMESPACE/NAME:PORTNAME)"
			}
			found = p
		}
	}
	switch {
	case found == nil && name == "":
		return 0, "no port"
	case found == nil:
		return 0, fmt.Sprintf("no port named %q", name)
	case found.Port == nil || *found.Port <= 0 || *found.Port > 65535:
		return 0, "its port has no number"
	case found.Protocol != nil && *found.Protocol != corev1.ProtocolTCP:
		return 0, fmt.Sprintf("port protocol %s: want TCP", *found.Protocol)
	}
	return *found.Port, ""
}

// usable reports whether an endpoint with these conditions may take requests (see NodeURLs).
func usable(c discoveryv1.EndpointConditions) bool {
	return (c.Ready == nil || *c.Ready) && (c.Serving == nil || *c.Serving) && (c.Terminating == nil || !*c.Terminating)
}
