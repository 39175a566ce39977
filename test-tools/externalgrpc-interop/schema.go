package main

// The externalgrpc schema, compiled from externalgrpc.proto when the program starts, and small
// accessors for the dynamic messages built from it.

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

//go:embed externalgrpc.proto
var schemaSource string

const (
	schemaFile  = "externalgrpc.proto"
	serviceName = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"
)

// loadService compiles the embedded schema and returns its CloudProvider service.
func loadService() (protoreflect.ServiceDescriptor, error) {
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{schemaFile: schemaSource}),
		}),
	}
	files, err := compiler.Compile(context.Background(), schemaFile)
	if err != nil {
		return nil, fmt.Errorf("compiling the embedded %s: %w", schemaFile, err)
	}
	descriptor := files.FindFileByPath(schemaFile)
	if descriptor == nil {
		return nil, fmt.Errorf("the compiled schema has no file %s", schemaFile)
	}
	service := descriptor.Services().ByName("CloudProvider")
	if service == nil || service.FullName() != serviceName {
		return nil, fmt.Errorf("the embedded schema does not define %s", serviceName)
	}
	return service, nil
}

// messageFrom builds a message of the given type from a JSON-shaped Go value (proto JSON names,
// durations as "600s"), so requests and answers read like the spec's tables.
func messageFrom(descriptor protoreflect.MessageDescriptor, fields map[string]any) (*dynamicpb.Message, error) {
	message := dynamicpb.NewMessage(descriptor)
	if fields == nil {
		// An empty message; JSON null is not a message.
		fields = map[string]any{}
	}
	text, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(text, message); err != nil {
		return nil, fmt.Errorf("building %s from %s: %w", descriptor.FullName(), text, err)
	}
	return message, nil
}

func field(message protoreflect.Message, name string) protoreflect.FieldDescriptor {
	descriptor := message.Descriptor().Fields().ByName(protoreflect.Name(name))
	if descriptor == nil {
		// A typo in this program, not something a peer sent.
		panic(fmt.Sprintf("%s has no field %s", message.Descriptor().FullName(), name))
	}
	return descriptor
}

func stringField(message protoreflect.Message, name string) string {
	return message.Get(field(message, name)).String()
}

func intField(message protoreflect.Message, name string) int64 {
	value := message.Get(field(message, name))
	if descriptor := field(message, name); descriptor.Kind() == protoreflect.EnumKind {
		return int64(value.Enum())
	}
	return value.Int()
}

func floatField(message protoreflect.Message, name string) float64 {
	return message.Get(field(message, name)).Float()
}

func boolField(message protoreflect.Message, name string) bool {
	return message.Get(field(message, name)).Bool()
}

func bytesField(message protoreflect.Message, name string) []byte {
	return message.Get(field(message, name)).Bytes()
}

// messageField is the embedded message, or nil when it is absent on the wire: an empty but present
// message (bytes "0a 00") is not nil.
func messageField(message protoreflect.Message, name string) protoreflect.Message {
	descriptor := field(message, name)
	if !message.Has(descriptor) {
		return nil
	}
	return message.Get(descriptor).Message()
}

func listField(message protoreflect.Message, name string) []protoreflect.Message {
	list := message.Get(field(message, name)).List()
	items := make([]protoreflect.Message, 0, list.Len())
	for i := 0; i < list.Len(); i++ {
		items = append(items, list.Get(i).Message())
	}
	return items
}

func stringMapField(message protoreflect.Message, name string) map[string]string {
	entries := map[string]string{}
	message.Get(field(message, name)).Map().Range(func(key protoreflect.MapKey, value protoreflect.Value) bool {
		entries[key.String()] = value.String()
		return true
	})
	return entries
}

func mapKeys(message protoreflect.Message, name string) []string {
	keys := []string{}
	message.Get(field(message, name)).Map().Range(func(key protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, key.String())
		return true
	})
	return keys
}

// durationSeconds reads a google.protobuf.Duration field; nil when absent.
func durationSeconds(message protoreflect.Message, name string) *float64 {
	duration := messageField(message, name)
	if duration == nil {
		return nil
	}
	seconds := float64(intField(duration, "seconds")) + float64(intField(duration, "nanos"))/1e9
	return &seconds
}
