package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Requests the server would refuse but that cannot reach it as the caller wrote them are refused
// here, before any call, the way the server refuses a bad field: an *Error with code
// InvalidArgument whose message starts with the field ("limits[0].key: ...").

// utf8Conn refuses a request with a string that is not valid UTF-8 (a name, a key, a request
// id...). Protobuf strings must be: gRPC would fail to encode the request and answer INTERNAL
// "grpc: error while marshaling: string field contains invalid UTF-8", naming no field.
type utf8Conn struct {
	grpc.ClientConnInterface
}

// Invoke sends the call, or refuses its request without sending it (see utf8Conn).
func (c utf8Conn) Invoke(ctx context.Context, method string, args, reply any,
	opts ...grpc.CallOption) error {
	if m, ok := args.(proto.Message); ok {
		if err := refuseInvalidUTF8(m); err != nil {
			return err
		}
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// refuseInvalidUTF8 is utf8Conn's refusal of a request m with a string that is not valid UTF-8
// (a status error naming the field), or nil. The ops of a lease stream (lease_stream.go), which
// do not go through Invoke, are refused by it too, as their calls would be.
func refuseInvalidUTF8(m proto.Message) error {
	if field, value, bad := invalidUTF8(m.ProtoReflect()); bad {
		return status.Errorf(codes.InvalidArgument,
			"%s: must be valid UTF-8, got %q (refused by the client, not sent)", field, value)
	}
	return nil
}

// invalidUTF8 finds the first string of m, in field order, that is not valid UTF-8, and names
// it as the server names fields: the proto field names joined by dots, an index in brackets
// ("limits[0].key"). The name is built only for a string found, on the way back up, so that
// checking a valid request costs little (a few hundred nanoseconds for a Consume).
func invalidUTF8(m protoreflect.Message) (field, value string, bad bool) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		name := string(fd.Name())
		v := m.Get(fd)
		switch {
		case fd.IsList():
			list := v.List()
			for j := 0; j < list.Len(); j++ {
				if field, value, bad = invalidUTF8In(fd, list.Get(j)); bad {
					return join(name+"["+strconv.Itoa(j)+"]", field), value, true
				}
			}
		case fd.IsMap():
			if field, value, bad = invalidUTF8InMap(fd, v.Map()); bad {
				return join(name, field), value, true
			}
		default:
			if field, value, bad = invalidUTF8In(fd, v); bad {
				// A BatchEntry's request is named after its entry, as the server does
				// ("entries[2].limits[0].key", not "entries[2].request.limits[0].key").
				if fd.FullName() == "ratelimit.v1.BatchEntry.request" {
					return field, value, true
				}
				return join(name, field), value, true
			}
		}
	}
	return "", "", false
}

// invalidUTF8In checks one value of field fd: a string, or a message's strings (field is then
// the path within it; empty for the string itself).
func invalidUTF8In(fd protoreflect.FieldDescriptor, v protoreflect.Value) (
	field, value string, bad bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s := v.String(); !utf8.ValidString(s) {
			return "", s, true
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return invalidUTF8(v.Message())
	}
	return "", "", false
}

// invalidUTF8InMap checks the keys and values of map field fd (none of the requests has one;
// a string in one is named by the map's field).
func invalidUTF8InMap(fd protoreflect.FieldDescriptor, m protoreflect.Map) (
	field, value string, bad bool) {
	m.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
		if s, ok := k.Interface().(string); ok && !utf8.ValidString(s) {
			value, bad = s, true
		} else {
			_, value, bad = invalidUTF8In(fd.MapValue(), e)
		}
		return !bad
	})
	return "", value, bad
}

// join is the path of field within the field named outer.
func join(outer, field string) string {
	if field == "" {
		return outer
	}
	return outer + "." + field
}

// checkTTL refuses a lease TTL the server would not take as given: negative, or positive but
// under 1 ms. The server reads durations in whole microseconds, so its refusal would name a
// truncated value ("got 0" for 500ns) or none (a negative one); this names the caller's. 0 is
// not sent at all: the limit's lease_ttl.
func checkTTL(method string, ttl time.Duration) error {
	if ttl == 0 || ttl >= time.Millisecond {
		return nil
	}
	return newError(method, status.Error(codes.InvalidArgument, fmt.Sprintf(
		"ttl: must be 0 (the limit's lease_ttl) or between 1ms and the limit's max_lease_ttl, "+
			"got %v (refused by the client, not sent)", ttl)))
}
