package ratelimit

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "ratelimit.dev/client/go/gen/ratelimit/v1"
)

// Error is a failed call: the gRPC status code and message, and the request field the server
// named (its messages for a bad field start with it, e.g. "limits[0].key: must not be empty").
// status.Code(err) and status.FromError work on it.
type Error struct {
	// Method is the RPC: Consume, Check, Reserve, Reset, Settle, Batch, one of the lease calls
	// (Acquire, Release, Extend, ListLeases) or one of the override calls (SetOverride,
	// GetOverride, DeleteOverride, ListOverrides, ListOverrideAudit).
	Method string
	Code   codes.Code
	// Message is the server's message, field included.
	Message string
	// Field is the request field the message starts with ("limits[0].key"); empty when it
	// names none. It is set only for the codes the server answers a bad field with
	// (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ALREADY_EXISTS, PERMISSION_DENIED) and
	// only when it begins with a field of the method's request, so that a message of gRPC's own
	// ("grpc: error while marshaling: ...") never passes for one.
	Field string
	err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("ratelimit: %s: %s: %s", e.Method, codeName(e.Code), e.Message)
}

// Unwrap returns the gRPC status error.
func (e *Error) Unwrap() error { return e.err }

// GRPCStatus makes status.Code and status.FromError see the call's status.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// fieldPattern matches a field path as the server writes it: limits[0].config.rate, name, ...
var fieldPattern = regexp.MustCompile(`^([a-z_]+(\[[0-9]+\])?)(\.[a-z_]+(\[[0-9]+\])?)*: `)

// requests is the request message of each method of the service (Consume: RateLimitRequest),
// whose fields are the first part of the field paths the server names.
var requests = func() map[string]protoreflect.MessageDescriptor {
	out := map[string]protoreflect.MessageDescriptor{}
	services := pb.File_ratelimit_v1_ratelimit_proto.Services()
	for i := 0; i < services.Len(); i++ {
		methods := services.Get(i).Methods()
		for j := 0; j < methods.Len(); j++ {
			out[string(methods.Get(j).Name())] = methods.Get(j).Input()
		}
	}
	return out
}()

func newError(method string, err error) *Error {
	s := status.Convert(err)
	e := &Error{Method: method, Code: s.Code(), Message: s.Message(), err: err}
	e.Field = fieldOf(method, e.Code, e.Message)
	return e
}

// fieldOf is the request field a status of method names, as the server writes it at the start
// of the message ("limits[0].key: must not be empty"); empty when it names none. gRPC's own
// messages start the same way ("grpc: ...", "transport: ..."), but with other codes and with a
// word that is no field of the request.
func fieldOf(method string, code codes.Code, message string) string {
	switch code {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists,
		codes.PermissionDenied:
	default:
		return ""
	}
	m := fieldPattern.FindString(message)
	request, known := requests[method]
	if m == "" || !known {
		return ""
	}
	field := m[:len(m)-2]
	first := field
	if end := strings.IndexAny(first, ".["); end >= 0 {
		first = first[:end]
	}
	if request.Fields().ByName(protoreflect.Name(first)) == nil {
		return ""
	}
	return field
}

// codeName is the code as the server and the CLI print it (INVALID_ARGUMENT).
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	}
	return c.String()
}

// DeniedError is returned by WaitRequest (and Wait, WaitN) when the reservation is denied.
type DeniedError struct {
	Result *Result
}

func (e *DeniedError) Error() string {
	if e.Result.RetryAt.IsZero() {
		return fmt.Sprintf("ratelimit: reservation denied (%v), no retry can succeed",
			e.Result.Reason)
	}
	return fmt.Sprintf("ratelimit: reservation denied (%v), retry at %v", e.Result.Reason,
		e.Result.RetryAt.Format(time.RFC3339Nano))
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func durationOf(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}
