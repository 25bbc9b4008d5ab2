package ratelimit

import (
	"fmt"
	"regexp"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Error is a failed call: the gRPC status code and message, and the request field the server
// named (INVALID_ARGUMENT and PERMISSION_DENIED messages start with it, e.g.
// "limits[0].key: must not be empty"). status.Code(err) and status.FromError work on it.
type Error struct {
	// Method is the RPC: Consume, Check, Reserve, Reset, Settle, Batch, one of the lease calls
	// (Acquire, Release, Extend, ListLeases) or one of the override calls (SetOverride,
	// GetOverride, DeleteOverride, ListOverrides, ListOverrideAudit).
	Method string
	Code   codes.Code
	// Message is the server's message, field included.
	Message string
	// Field is the field the message starts with ("limits[0].key"); empty when it names none.
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

func newError(method string, err error) *Error {
	s := status.Convert(err)
	e := &Error{Method: method, Code: s.Code(), Message: s.Message(), err: err}
	if m := fieldPattern.FindString(e.Message); m != "" {
		e.Field = m[:len(m)-2]
	}
	return e
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
