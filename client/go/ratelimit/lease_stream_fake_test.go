package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
	"ratelimit.dev/client/go/ratelimit"
)

// streamLeases is fakeLeases with a LeaseStream: by default each message's ops are decided by
// fakeLeases's calls and answered together, in order; handle, when set, serves stream number n
// (1, 2...) instead. It counts the ops of each kind that came on a stream, and the calls
// (unary) that came as calls, the messages' op counts, and tells extended of each Extend op.
type streamLeases struct {
	*fakeLeases
	handle     func(n int64, ss pb.RateLimitService_LeaseStreamServer) error
	streams    atomic.Int64
	halfClosed chan struct{} // closed when the client half-closes a stream (CloseSend)
	halfOnce   sync.Once
	extended   chan struct{} // (buffered) one per Extend op, if the test reads them

	mu       sync.Mutex
	messages []int          // ops per message received, in order
	sizes    []int          // bytes of each message received
	onStream map[string]int // "acquire", "release", "extend": ops received on streams
	asCalls  map[string]int // the same, received as unary calls
}

func newStreamLeases(capacity uint64) *streamLeases {
	return &streamLeases{fakeLeases: newFakeLeases(capacity), halfClosed: make(chan struct{}),
		extended: make(chan struct{}, 1000), onStream: map[string]int{}, asCalls: map[string]int{}}
}

func (f *streamLeases) LeaseStream(ss pb.RateLimitService_LeaseStreamServer) error {
	n := f.streams.Add(1)
	if f.handle != nil {
		return f.handle(n, ss)
	}
	return f.serve(ss)
}

// serve answers each message's ops, decided in order, in one message, until the client
// half-closes (then the stream ends OK) or the stream breaks.
func (f *streamLeases) serve(ss pb.RateLimitService_LeaseStreamServer) error {
	for {
		req, err := f.recv(ss)
		if err == io.EOF {
			f.halfOnce.Do(func() { close(f.halfClosed) })
			return nil
		}
		if err != nil {
			return err
		}
		resp := &pb.LeaseStreamResponse{}
		for _, op := range req.Ops {
			resp.Results = append(resp.Results, f.decide(ss.Context(), op))
		}
		if err := ss.Send(resp); err != nil {
			return err
		}
	}
}

// recv receives a message, recording its op count and kinds.
func (f *streamLeases) recv(ss pb.RateLimitService_LeaseStreamServer) (
	*pb.LeaseStreamRequest, error) {
	req, err := ss.Recv()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.messages = append(f.messages, len(req.Ops))
	f.sizes = append(f.sizes, proto.Size(req))
	for _, op := range req.Ops {
		switch op.Op.(type) {
		case *pb.LeaseOp_Acquire:
			f.onStream["acquire"]++
		case *pb.LeaseOp_Release:
			f.onStream["release"]++
		case *pb.LeaseOp_Extend:
			f.onStream["extend"]++
			select {
			case f.extended <- struct{}{}:
			default:
			}
		}
	}
	return req, nil
}

// recvOps receives messages until n ops have come.
func (f *streamLeases) recvOps(ss pb.RateLimitService_LeaseStreamServer, n int) (
	[]*pb.LeaseOp, error) {
	var ops []*pb.LeaseOp
	for len(ops) < n {
		req, err := f.recv(ss)
		if err != nil {
			return nil, err
		}
		ops = append(ops, req.Ops...)
	}
	return ops, nil
}

// decide answers op as fakeLeases's call answers its request.
func (f *streamLeases) decide(ctx context.Context, op *pb.LeaseOp) *pb.LeaseOpResult {
	r := &pb.LeaseOpResult{Id: op.Id}
	var err error
	switch o := op.Op.(type) {
	case *pb.LeaseOp_Acquire:
		var a *pb.AcquireResponse
		if a, err = f.fakeLeases.Acquire(ctx, o.Acquire); err == nil {
			r.Result = &pb.LeaseOpResult_Acquire{Acquire: a}
		}
	case *pb.LeaseOp_Release:
		var a *pb.ReleaseResponse
		if a, err = f.fakeLeases.Release(ctx, o.Release); err == nil {
			r.Result = &pb.LeaseOpResult_Release{Release: a}
		}
	case *pb.LeaseOp_Extend:
		var a *pb.ExtendResponse
		if a, err = f.fakeLeases.Extend(ctx, o.Extend); err == nil {
			r.Result = &pb.LeaseOpResult_Extend{Extend: a}
		}
	default:
		err = status.Error(codes.InvalidArgument, "op: exactly one of acquire, release, extend")
	}
	if err != nil {
		s := status.Convert(err)
		r.Code, r.Message = int32(s.Code()), s.Message()
	}
	return r
}

func (f *streamLeases) Acquire(ctx context.Context, req *pb.AcquireRequest) (
	*pb.AcquireResponse, error) {
	f.countCall("acquire")
	return f.fakeLeases.Acquire(ctx, req)
}

func (f *streamLeases) Release(ctx context.Context, req *pb.ReleaseRequest) (
	*pb.ReleaseResponse, error) {
	f.countCall("release")
	return f.fakeLeases.Release(ctx, req)
}

func (f *streamLeases) Extend(ctx context.Context, req *pb.ExtendRequest) (
	*pb.ExtendResponse, error) {
	f.countCall("extend")
	return f.fakeLeases.Extend(ctx, req)
}

func (f *streamLeases) countCall(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asCalls[kind]++
}

// seen is (ops on streams, calls) of kind, and the op counts of the messages so far.
func (f *streamLeases) seen(kind string) (onStream, asCalls int, messages []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.onStream[kind], f.asCalls[kind], append([]int(nil), f.messages...)
}

// serveStreamLeases serves f on a free loopback port until the test ends.
func serveStreamLeases(t *testing.T, f *streamLeases) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// streamClient dials addr with a lease stream (and opts); closed when the test ends.
func streamClient(t *testing.T, addr string, opts ...ratelimit.Option) *ratelimit.Client {
	t.Helper()
	c, err := ratelimit.Dial(addr, append([]ratelimit.Option{ratelimit.WithLeaseStream(true)},
		opts...)...)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sameError fails the test unless got is the error want is: the same *ratelimit.Error (method,
// code, message, field, text) wrapping the same status.
func sameError(t *testing.T, what string, got, want error) {
	t.Helper()
	var g, w *ratelimit.Error
	if !errors.As(got, &g) || !errors.As(want, &w) {
		t.Fatalf("%s: %v (%T), want %v (%T), both *ratelimit.Error", what, got, got, want, want)
	}
	gs, ws := status.Convert(errors.Unwrap(g)), status.Convert(errors.Unwrap(w))
	if g.Method != w.Method || g.Code != w.Code || g.Message != w.Message || g.Field != w.Field ||
		got.Error() != want.Error() || status.Code(got) != status.Code(want) ||
		gs.Code() != ws.Code() || gs.Message() != ws.Message() {
		t.Fatalf("%s:\n got  %+v (wrapping %v)\n want %+v (wrapping %v)", what, g, gs, w, ws)
	}
}

// gate is a client stream interceptor whose streams' first SendMsg waits until open is closed:
// entered is closed when that Send has begun.
type gate struct {
	entered, open chan struct{}
	once          sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) option() ratelimit.Option {
	return ratelimit.WithDialOptions(grpc.WithStreamInterceptor(func(ctx context.Context,
		desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer,
		opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &gatedStream{ClientStream: cs, g: g}, nil
	}))
}

type gatedStream struct {
	grpc.ClientStream
	g *gate
}

func (s *gatedStream) SendMsg(m interface{}) error {
	first := false
	s.g.once.Do(func() { first = true })
	if first {
		close(s.g.entered)
		<-s.g.open
	}
	return s.ClientStream.SendMsg(m)
}
