package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"ubatch/internal/httpauth"
)

// The Gateway API Inference Extension's endpoint picker protocol: the names a gateway (Envoy's
// ext_proc filter) and its picker exchange.
const (
	// DestinationHeader is the request header naming the picked endpoint (host:port).
	DestinationHeader = "x-gateway-destination-endpoint"
	// fallbackKey names one endpoint to try when the picked one fails, beside DestinationHeader
	// in the dynamic metadata.
	fallbackKey = "x-gateway-destination-endpoint-fallback"
	// lbNamespace is the dynamic metadata namespace the gateway's load balancer reads.
	lbNamespace = "envoy.lb"
	// subsetNamespace and subsetKey carry the endpoints the gateway allows for a request (a
	// list of host:port strings) in the filter metadata it sends; absent: every node.
	subsetNamespace = "envoy.lb.subset_hint"
	subsetKey       = "x-gateway-destination-endpoint-subset"
)

// ExtProc returns the router as an endpoint picker for gateways that implement the Gateway API
// Inference Extension (Envoy's ext_proc filter; register it on a gRPC server with
// extprocv3.RegisterExternalProcessorServer). Each request is scored as Handler routes it
// (prefix held, load) and answered with the picked node's host:port in DestinationHeader and in
// the "envoy.lb" dynamic metadata, with the next-best node as the fallback; the gateway then
// sends the request to the node itself. The gateway must buffer request bodies
// (processing_mode request_body_mode BUFFERED) for prefix routing; without a body (or with an
// unreadable one) the pick is by load. Limits as Handler's: a body over MaxBodyBytes is 413, a
// prompt longer than the nodes' context 400, no node 503, each answered to the client by the
// gateway.
func (r *Router) ExtProc() extprocv3.ExternalProcessorServer { return &extProc{r: r} }

type extProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	r *Router
}

// exchange is one HTTP request's state across its ext_proc messages.
type exchange struct {
	path, method, bearer string
	allow                map[string]bool // the gateway's endpoint subset; nil: every node
	body                 []byte
	claimed              *node // the picked node, released when the exchange ends
}

// Process serves one HTTP request's messages: the request's headers, then its body when it
// has one, then whatever the gateway sends of the response (answered unchanged).
func (x *extProc) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	var ex exchange
	defer func() {
		if ex.claimed != nil {
			x.r.release(ex.claimed)
		}
	}()
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := x.handle(st.Context(), &ex, req)
		if err != nil {
			return err
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// handle answers one message of the exchange.
func (x *extProc) handle(ctx context.Context, ex *exchange, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	switch m := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		ex.readHeaders(m.RequestHeaders.GetHeaders())
		allow, err := subset(req.GetMetadataContext())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		ex.allow = allow
		if !m.RequestHeaders.EndOfStream {
			// The pick waits for the body; the gateway holds the headers until then.
			return headersResponse(nil), nil
		}
		return x.pick(ctx, ex, parsed{}, true), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		ex.body = append(ex.body, m.RequestBody.GetBody()...)
		if int64(len(ex.body)) > x.r.cfg.MaxBodyBytes {
			x.r.m.rejected.WithLabelValues("too_large").Inc()
			return immediate(http.StatusRequestEntityTooLarge, errorBody("invalid_request_error", "request_too_large", "",
				fmt.Sprintf("request body is larger than %d bytes, the router's --max-body: send less", x.r.cfg.MaxBodyBytes))), nil
		}
		if !m.RequestBody.EndOfStream {
			return bodyResponse(nil), nil
		}
		var p parsed
		if ex.method == http.MethodPost {
			var ref *refusal
			if p, ref = x.r.parseBody(ex.path, ex.bearer, ex.body); ref != nil {
				return immediate(ref.status, errorBody(ref.typ, ref.code, ref.param, ref.msg)), nil
			}
		}
		return x.pick(ctx, ex, p, false), nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "ext_proc message %T is not handled", m)
	}
}

// pick chooses the node for the exchange's request and answers with it as a mutation of the
// request headers (onHeaders: the request has no body) or with its body.
func (x *extProc) pick(ctx context.Context, ex *exchange, p parsed, onHeaders bool) *extprocv3.ProcessingResponse {
	d := x.r.decideAmong(ctx, p.tokens, p.root, len(ex.body), ex.allow)
	if len(d.order) == 0 {
		x.r.m.rejected.WithLabelValues("no_node").Inc()
		return immediate(http.StatusServiceUnavailable, errorBody("server_error", "no_healthy_node", "",
			"no inference node is in rotation among the endpoints the gateway allows: check the nodes' /health and the router's log"))
	}
	best := d.order[0]
	ex.claimed = best.n
	x.r.m.routed(best.n.label, d.reason, len(p.tokens), best.cached+best.fetch)
	meta := map[string]any{DestinationHeader: best.n.label}
	if len(d.order) > 1 {
		meta[fallbackKey] = d.order[1].n.label
	}
	lb, _ := structpb.NewStruct(meta) // strings only: cannot fail
	mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(best.n.label)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}}
	resp := bodyResponse(mut)
	if onHeaders {
		resp = headersResponse(mut)
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{lbNamespace: structpb.NewStructValue(lb)}}
	return resp
}

// readHeaders keeps what the pick needs of the request headers.
func (ex *exchange) readHeaders(h *corev3.HeaderMap) {
	for _, kv := range h.GetHeaders() {
		v := kv.GetValue()
		if len(kv.GetRawValue()) > 0 {
			v = string(kv.GetRawValue())
		}
		switch strings.ToLower(kv.GetKey()) {
		case ":path":
			ex.path, _, _ = strings.Cut(v, "?")
		case ":method":
			ex.method = v
		case "authorization":
			ex.bearer = httpauth.Bearer(&http.Request{Header: http.Header{"Authorization": {v}}})
		}
	}
}

// subset reads the gateway's endpoint subset from the filter metadata: nil when it sent none,
// else the set of host:port strings (empty when it allows none).
func subset(md *corev3.Metadata) (map[string]bool, error) {
	ns, ok := md.GetFilterMetadata()[subsetNamespace]
	if !ok {
		return nil, nil
	}
	v, ok := ns.GetFields()[subsetKey]
	if !ok {
		return nil, nil
	}
	list := v.GetListValue()
	if list == nil {
		return nil, fmt.Errorf("%s.%s must be a list of host:port strings", subsetNamespace, subsetKey)
	}
	out := make(map[string]bool, len(list.GetValues()))
	for _, e := range list.GetValues() {
		s, ok := e.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("%s.%s holds a %T, not a host:port string", subsetNamespace, subsetKey, e.GetKind())
		}
		out[s.StringValue] = true
	}
	return out, nil
}

func headersResponse(mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}}}}
}

func bodyResponse(mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}}}}
}

// immediate is the answer the gateway sends the client instead of forwarding the request.
func immediate(code int, body []byte) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Body:   body,
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
		}}}
}
