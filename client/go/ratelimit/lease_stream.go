package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// A lease stream (WithLeaseStream; docs/leases.md, lease streams) carries a Client's Acquire,
// Release and Extend calls as ops of one bidirectional LeaseStream. Each op has an id of the
// client's counter and waits for the result with that id; results come in any order. One
// sender goroutine per stream sends the queued ops, packing those queued while a Send is in
// progress into one message; one receiver goroutine hands each result to its op. The stream is
// opened by the first op that finds none, and ends at an error of either side (every op still
// waiting then fails as a call cut off would: UNAVAILABLE) or at Close.

// maxLeaseStreamOps and maxLeaseStreamBytes bound a LeaseStreamRequest, as the server does
// (more ops, or more bytes, would end the stream with INVALID_ARGUMENT or RESOURCE_EXHAUSTED).
const (
	maxLeaseStreamOps   = 1000
	maxLeaseStreamBytes = 64 << 10
)

// errAsCall says that an op is to be sent as a call: the client has no stream now (closed), or
// the server has no LeaseStream.
var errAsCall = errors.New("ratelimit: lease op sent as a call")

// leaseStreams is a Client's lease stream: the stream open now (if any), the opening of the
// next, and the fallback to calls.
type leaseStreams struct {
	stub      pb.RateLimitServiceClient
	closeWait time.Duration   // how long Close waits for the stream's end after CloseSend
	ctx       context.Context // every stream's and opening's; cancelled by close
	cancel    context.CancelFunc
	ids       atomic.Uint64 // the last op id given
	calls     atomic.Bool   // the server has no LeaseStream: every op goes as a call
	logger    *log.Logger
	wg        sync.WaitGroup // the goroutines: openings, senders, receivers
	queued    func(n int)    // tests: called after an op is queued, with the queue's length

	mu      sync.Mutex
	cur     *leaseStream      // the stream ops go on; nil when none is open
	opening [2]*streamOpening // in progress: [0] fails fast, [1] waits for the connection
	closed  bool
}

// streamOpening is one attempt at opening a stream; done is closed when it is over, err then
// set when it failed.
type streamOpening struct {
	waitForReady bool
	done         chan struct{}
	err          error
}

// leaseStream is one LeaseStream and its ops.
type leaseStream struct {
	ls      *leaseStreams
	stream  pb.RateLimitService_LeaseStreamClient
	cancel  context.CancelFunc
	wake    chan struct{} // (1) an op was queued
	closing chan struct{} // closed by Close: the sender sends what is queued, then CloseSend
	ended   chan struct{} // closed when the stream has ended and every op waiting was answered

	mu       sync.Mutex
	queue    []*pendingOp          // not sent yet (those no longer waiting are skipped)
	waiting  map[uint64]*pendingOp // sent or queued, by id, until answered or abandoned
	done     bool                  // the stream has ended: nothing more is queued
	answered bool                  // a result came: the server has LeaseStream
}

// pendingOp is one op on its way: its message, its size in a LeaseStreamRequest, and where its
// outcome is delivered (once).
type pendingOp struct {
	msg  *pb.LeaseOp
	size int
	out  chan opOutcome
}

// opOutcome is how an op ended: its result, or the stream's end (err, a status error), or
// asCall (the server has no LeaseStream: the op was not decided).
type opOutcome struct {
	result *pb.LeaseOpResult
	err    error
	asCall bool
}

func newLeaseStreams(stub pb.RateLimitServiceClient, closeWait time.Duration) *leaseStreams {
	ls := &leaseStreams{stub: stub, closeWait: closeWait, logger: log.Default()}
	ls.ctx, ls.cancel = context.WithCancel(context.Background())
	return ls
}

// waitsForReady is whether call options make a call wait for the connection
// (grpc.WaitForReady(true), a heartbeat's Extend).
func waitsForReady(opts []grpc.CallOption) bool {
	wait := false
	for _, o := range opts {
		if f, ok := o.(grpc.FailFastCallOption); ok {
			wait = !f.FailFast
		}
	}
	return wait
}

// leaseOp sends op (its id is set here) on the client's lease stream and waits for its result,
// under ctx (the call's context, with its deadline). sent is false when the op is to go as a
// call instead: no WithLeaseStream, a server without LeaseStream, a closed client, or an op too
// large for a stream message (its call is then refused as the server refuses it). With sent, err
// is the error the call would return for the op's outcome (the result's status, the stream's
// end as UNAVAILABLE, ctx's end, a refusal before sending), or res the result of an op answered
// OK, with the answer of the op's kind.
func (c *Client) leaseOp(ctx context.Context, method string, op *pb.LeaseOp,
	waitForReady bool) (res *pb.LeaseOpResult, sent bool, err error) {
	ls := c.leases
	if ls == nil || ls.calls.Load() {
		return nil, false, nil
	}
	op.Id = ls.ids.Add(1)
	size := proto.Size(op)
	size += protowire.SizeTag(1) + protowire.SizeVarint(uint64(size))
	if size > maxLeaseStreamBytes {
		return nil, false, nil
	}
	// What a call's Invoke refuses before sending (utf8Conn), then an ended context, as gRPC.
	if err := refuseInvalidUTF8(requestOf(op)); err != nil {
		return nil, true, newError(method, err)
	}
	if ctx.Err() != nil {
		return nil, true, newError(method, status.FromContextError(ctx.Err()).Err())
	}
	p := &pendingOp{msg: op, size: size, out: make(chan opOutcome, 1)}
	var s *leaseStream
	for {
		s, err = ls.stream(ctx, waitForReady)
		if err == errAsCall {
			return nil, false, nil
		}
		if err != nil {
			return nil, true, newError(method, err)
		}
		if s.enqueue(p) {
			break
		}
	}
	select {
	case o := <-p.out:
		switch {
		case o.asCall:
			return nil, false, nil
		case o.err != nil:
			return nil, true, newError(method, o.err)
		}
		return checkResult(method, op, o.result)
	case <-ctx.Done():
		s.abandon(p) // its result, if one comes, is dropped
		return nil, true, newError(method, status.FromContextError(ctx.Err()).Err())
	}
}

// requestOf is the request an op carries (nil for none), which its call would send.
func requestOf(op *pb.LeaseOp) proto.Message {
	switch o := op.Op.(type) {
	case *pb.LeaseOp_Acquire:
		return o.Acquire
	case *pb.LeaseOp_Release:
		return o.Release
	case *pb.LeaseOp_Extend:
		return o.Extend
	}
	return nil
}

// checkResult is the outcome of op's result r, as its call's: code != 0 is the *Error of that
// status; code 0 is r, with the answer of op's kind (an empty one when the server sent none, as
// a call's empty response decodes).
func checkResult(method string, op *pb.LeaseOp, r *pb.LeaseOpResult) (
	*pb.LeaseOpResult, bool, error) {
	if r.Code != int32(codes.OK) {
		return nil, true, newError(method, status.Error(codes.Code(r.Code), r.Message))
	}
	if r.Result == nil {
		switch op.Op.(type) {
		case *pb.LeaseOp_Acquire:
			r.Result = &pb.LeaseOpResult_Acquire{Acquire: &pb.AcquireResponse{}}
		case *pb.LeaseOp_Release:
			r.Result = &pb.LeaseOpResult_Release{Release: &pb.ReleaseResponse{}}
		case *pb.LeaseOp_Extend:
			r.Result = &pb.LeaseOpResult_Extend{Extend: &pb.ExtendResponse{}}
		}
	}
	var kindOK bool
	switch op.Op.(type) {
	case *pb.LeaseOp_Acquire:
		kindOK = r.GetAcquire() != nil
	case *pb.LeaseOp_Release:
		kindOK = r.GetRelease() != nil
	case *pb.LeaseOp_Extend:
		kindOK = r.GetExtend() != nil
	}
	if !kindOK {
		return nil, true, newError(method, status.Errorf(codes.Internal,
			"lease stream: the result of op %d is not the answer to a %s", op.Id, method))
	}
	return r, true, nil
}

// stream is the stream to queue an op on: the open one, or one this opens (or another op is
// opening), waiting under ctx. errAsCall when ops go as calls; else an error is a status error:
// the opening's (UNAVAILABLE when the server cannot be reached, as a call's) or ctx's end. An
// op that waits for the connection (waitForReady) never fails for want of one: it opens the
// stream waiting for the connection, as its call would be sent.
func (ls *leaseStreams) stream(ctx context.Context, waitForReady bool) (*leaseStream, error) {
	kind := 0
	if waitForReady {
		kind = 1
	}
	for {
		ls.mu.Lock()
		if ls.closed || ls.calls.Load() {
			ls.mu.Unlock()
			return nil, errAsCall
		}
		if s := ls.cur; s != nil {
			ls.mu.Unlock()
			return s, nil
		}
		o := ls.opening[kind]
		if o == nil {
			o = &streamOpening{waitForReady: waitForReady, done: make(chan struct{})}
			ls.opening[kind] = o
			ls.wg.Add(1)
			go ls.open(o, kind)
		}
		ls.mu.Unlock()
		select {
		case <-o.done:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if o.err == nil {
			continue // the stream it opened (or, if that one has already ended, a new one)
		}
		ls.mu.Lock()
		off := ls.closed || ls.calls.Load()
		ls.mu.Unlock()
		if !off {
			return nil, o.err
		}
	}
}

// open opens a stream for the ops waiting on o, which becomes the current stream (unless
// another opening's has, or the client is closing).
func (ls *leaseStreams) open(o *streamOpening, kind int) {
	defer ls.wg.Done()
	ctx, cancel := context.WithCancel(ls.ctx)
	var opts []grpc.CallOption
	if o.waitForReady {
		opts = append(opts, grpc.WaitForReady(true))
	}
	stream, err := ls.stub.LeaseStream(ctx, opts...)
	if status.Code(err) == codes.Unimplemented {
		ls.fallBack(err)
	}
	ls.mu.Lock()
	ls.opening[kind] = nil
	switch {
	case err != nil:
		cancel()
		o.err = err
	case ls.cur != nil || ls.closed:
		cancel() // not needed
	default:
		s := &leaseStream{ls: ls, stream: stream, cancel: cancel, wake: make(chan struct{}, 1),
			closing: make(chan struct{}), ended: make(chan struct{}),
			waiting: map[uint64]*pendingOp{}}
		ls.cur = s
		ls.wg.Add(2)
		go s.send()
		go s.receive()
	}
	ls.mu.Unlock()
	close(o.done)
}

// fallBack makes every op from now on go as a call: the server answered err (UNIMPLEMENTED) to
// LeaseStream. Logged once.
func (ls *leaseStreams) fallBack(err error) {
	if ls.calls.Swap(true) {
		return
	}
	ls.logger.Printf("ratelimit: the server does not implement LeaseStream (%s: %s): "+
		"Acquire, Release and Extend are sent as calls from now on", codeName(status.Code(err)),
		status.Convert(err).Message())
}

// close ends the stream (CloseSend, then the answers to the ops sent are waited for, up to
// closeWait) and waits for every goroutine to return. Ops from now on go as calls.
func (ls *leaseStreams) close() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.closed = true
	s := ls.cur
	ls.mu.Unlock()
	if s != nil {
		close(s.closing)
		t := time.NewTimer(ls.closeWait)
		select {
		case <-s.ended:
		case <-t.C:
		}
		t.Stop()
	}
	ls.cancel()
	ls.wg.Wait()
}

// enqueue queues p for the sender and registers it for its result; false when the stream has
// ended (the op goes on the next).
func (s *leaseStream) enqueue(p *pendingOp) bool {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return false
	}
	s.waiting[p.msg.Id] = p
	s.queue = append(s.queue, p)
	n := len(s.queue)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if s.ls.queued != nil {
		s.ls.queued(n)
	}
	return true
}

// abandon forgets p, whose caller has gone: not sent if still queued, its result dropped.
func (s *leaseStream) abandon(p *pendingOp) {
	s.mu.Lock()
	if s.waiting[p.msg.Id] == p {
		delete(s.waiting, p.msg.Id)
	}
	s.mu.Unlock()
}

// take is the next message to send: the ops queued, in order, up to maxLeaseStreamOps and
// maxLeaseStreamBytes; nil when none is.
func (s *leaseStream) take() *pb.LeaseStreamRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var req *pb.LeaseStreamRequest
	size, n := 0, 0
	for ; n < len(s.queue); n++ {
		p := s.queue[n]
		if s.waiting[p.msg.Id] != p {
			s.queue[n] = nil
			continue // abandoned
		}
		if req != nil && (len(req.Ops) == maxLeaseStreamOps || size+p.size > maxLeaseStreamBytes) {
			break
		}
		if req == nil {
			req = &pb.LeaseStreamRequest{}
		}
		req.Ops = append(req.Ops, p.msg)
		size += p.size
		s.queue[n] = nil
	}
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	return req
}

// send is the stream's sender: it sends the queued ops, those queued during a Send together in
// the next message, until the stream ends; at Close, it sends what is queued and half-closes.
func (s *leaseStream) send() {
	defer s.ls.wg.Done()
	for {
		closing := false
		select {
		case <-s.wake:
		case <-s.closing:
			closing = true
		case <-s.ended:
			return
		}
		for req := s.take(); req != nil; req = s.take() {
			if err := s.stream.Send(req); err != nil {
				if err != io.EOF {
					s.end(err) // the stream may go on otherwise, and no Recv would say why
				}
				return // io.EOF: the stream has ended; the receiver gets its status
			}
		}
		if closing {
			_ = s.stream.CloseSend()
			return
		}
	}
}

// receive is the stream's receiver: it hands each result to its op until the stream ends.
func (s *leaseStream) receive() {
	defer s.ls.wg.Done()
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.end(err)
			return
		}
		s.mu.Lock()
		s.answered = true
		for _, r := range resp.Results {
			if p := s.waiting[r.Id]; p != nil {
				delete(s.waiting, r.Id)
				p.out <- opOutcome{result: r}
			}
		}
		s.mu.Unlock()
	}
}

// end ends the stream, which err (a status error, or io.EOF for an OK status) ended: the next op
// opens another, and every op waiting fails with UNAVAILABLE carrying the stream's message (or
// goes as a call, when the server has no LeaseStream).
func (s *leaseStream) end(err error) {
	ls := s.ls
	st := status.Convert(err)
	s.mu.Lock()
	unimplemented := err != io.EOF && st.Code() == codes.Unimplemented && !s.answered
	s.mu.Unlock()
	if unimplemented {
		ls.fallBack(err) // before the stream is let go, so that no op opens another
	}
	ls.mu.Lock()
	if ls.cur == s {
		ls.cur = nil
	}
	closed := ls.closed
	ls.mu.Unlock()

	message := st.Message()
	switch {
	case closed:
		message = "lease stream closed: the client is closing"
	case err == io.EOF:
		message = "lease stream ended by the server before answering every op"
	case st.Code() != codes.Unavailable:
		message = fmt.Sprintf("lease stream ended: %s: %s", codeName(st.Code()), st.Message())
	}
	outcome := opOutcome{asCall: unimplemented}
	if !unimplemented {
		outcome.err = status.Error(codes.Unavailable, message)
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done = true
	for id, p := range s.waiting {
		delete(s.waiting, id)
		p.out <- outcome
	}
	s.queue = nil
	s.mu.Unlock()
	s.cancel()
	close(s.ended)
}
