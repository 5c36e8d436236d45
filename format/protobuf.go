package format

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoCodec encodes JSON payloads as one message of a registered .proto
// file: the payload is read by protojson (unknown fields refused) into a
// dynamic message built from the file's descriptor.
type protoCodec struct {
	file  protoreflect.FileDescriptor
	msg   protoreflect.MessageDescriptor
	index []int // msg's path among the file's messages, as the wire header carries it
	// partial: msg and the messages it holds have no required field, so
	// checking that each is set (most of the cost of a small message) is
	// skipped; with one (proto2), a payload without it is refused.
	partial bool
}

// protoFileName is the name the registered text is compiled under; its
// references keep the names the registry gives them (their import paths).
const protoFileName = "outboxd-registered.proto"

func newProto(s Schema) (*protoCodec, error) {
	srcs := maps.Clone(s.References)
	if srcs == nil {
		srcs = map[string]string{}
	}
	srcs[protoFileName] = s.Text
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)}),
		MaxParallelism: 1,
	}
	// Compiling reads only the map above: nothing to cancel.
	files, err := c.Compile(context.Background(), protoFileName)
	if err != nil {
		return nil, err
	}
	file := files[0]
	p := &protoCodec{file: file}
	if file.Messages().Len() == 0 {
		return nil, errors.New("the file defines no message")
	}
	if s.Message == "" {
		p.msg, p.index = file.Messages().Get(0), []int{0}
		p.partial = !hasRequired(p.msg, map[protoreflect.FullName]bool{})
		return p, nil
	}
	d := file.FindDescriptorByName(protoreflect.FullName(s.Message))
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("the file defines no message %s", s.Message)
	}
	p.msg, p.index = md, messageIndex(md)
	p.partial = !hasRequired(md, map[protoreflect.FullName]bool{})
	return p, nil
}

// hasRequired reports whether md or a message it holds has a required
// field; seen guards against recursive messages.
func hasRequired(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Cardinality() == protoreflect.Required {
			return true
		}
		if m := f.Message(); m != nil && hasRequired(m, seen) {
			return true
		}
	}
	return false
}

// messageIndex is md's path of indexes from the file's top-level messages
// through the nested ones.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var path []int
	for d := protoreflect.Descriptor(md); ; {
		path = append([]int{d.Index()}, path...)
		parent, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			return path
		}
		d = parent
	}
}

func (p *protoCodec) encode(b, in []byte) ([]byte, error) {
	m := dynamicpb.NewMessage(p.msg)
	if err := (protojson.UnmarshalOptions{AllowPartial: p.partial}).Unmarshal(in, m); err != nil {
		return nil, misfit("", "does not fit message %s: %v", p.msg.FullName(), err)
	}
	out, err := proto.MarshalOptions{Deterministic: true, AllowPartial: p.partial}.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("writing Protobuf: %w", err)
	}
	return out, nil
}

func (p *protoCodec) decode(body []byte) ([]byte, error) {
	var h sr.ConfluentHeader
	index, body, err := h.DecodeIndex(body, 64)
	if err != nil {
		return nil, fmt.Errorf("reading the message indexes: %w", err)
	}
	md, err := p.messageAt(index)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("reading Protobuf message %s: %w", md.FullName(), err)
	}
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
}

// messageAt is the message at index's path.
func (p *protoCodec) messageAt(index []int) (protoreflect.MessageDescriptor, error) {
	msgs := p.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v is not in the file", index)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md == nil {
		return nil, errors.New("no message index")
	}
	return md, nil
}
