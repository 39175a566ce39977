package main

// The server side: a tiny in-memory cloud of two groups served as the externalgrpc CloudProvider
// service, the way upstream's example server answers (plain errors as code 2, an empty nodeGroup
// message for a node outside every group, code 12 for what it does not implement), with template
// nodes marshalled by the Kubernetes Go types.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	gpuLabel = "interop.test/accelerator"
	// Instance states on the wire (spec 3.2).
	stateRunning  = 1
	stateCreating = 2
	stateDeleting = 3
)

var gpuTypes = []string{"nvidia-tesla-t4", "nvidia-a100"}

type instance struct {
	id string
	// 0 means the instance is sent without a status.
	state                   int
	errorCode, errorMessage string
	errorClass              int
}

type group struct {
	id, debug string
	// New instances are named this prefix and a number, like the initial ones.
	instanceIDPrefix string
	min, max         int
	target           int
	instances        []instance
	template         *corev1.Node
	options          map[string]any // nil: no override
	nextNumber       int
}

type cloud struct {
	mu     sync.Mutex
	groups []*group
}

// newCloud is the fixed cloud the Rust tests check against: what each group holds is part of
// their expectations.
func newCloud() *cloud {
	general := &group{
		id: "interop-general", debug: "interop-general: general purpose, zone a", instanceIDPrefix: "interop://general/i-",
		min: 0, max: 10, target: 2,
		instances: []instance{
			{id: "interop://general/i-0", state: stateRunning},
			{id: "interop://general/i-1", state: stateRunning},
		},
		template: templateNode("interop-general-template", map[string]string{
			"kubernetes.io/os":                 "linux",
			"node.kubernetes.io/instance-type": "interop.large",
			"topology.kubernetes.io/zone":      "interop-zone-a",
		}, nil, corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}, corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("3920m"),
			corev1.ResourceMemory: resource.MustParse("15Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}),
		options: map[string]any{
			"scaleDownUtilizationThreshold":    0.3,
			"scaleDownGpuUtilizationThreshold": 0.4,
			"zeroOrMaxNodeScaling":             false,
			"ignoreDaemonSetsUtilization":      true,
			"scaleDownUnneededDuration":        "300s",
			"scaleDownUnreadyDuration":         "900s",
			"MaxNodeProvisionDuration":         "600s",
		},
		nextNumber: 2,
	}
	gpu := &group{
		id: "interop-gpu", debug: "interop-gpu: one T4 per node, zone b", instanceIDPrefix: "interop://gpu/g-",
		min: 1, max: 3, target: 3,
		instances: []instance{
			{id: "interop://gpu/g-0", state: stateRunning},
			{id: "interop://gpu/g-1", state: stateCreating, errorCode: "QUOTA_EXCEEDED",
				errorMessage: "GPU quota exhausted in interop-zone-b", errorClass: 1},
			{id: "interop://gpu/g-2", state: stateDeleting},
			{id: "interop://gpu/g-3"},
		},
		template: templateNode("interop-gpu-template", map[string]string{
			"kubernetes.io/os":            "linux",
			"topology.kubernetes.io/zone": "interop-zone-b",
			gpuLabel:                      "nvidia-tesla-t4",
		}, []corev1.Taint{
			{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
		}, corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
			"nvidia.com/gpu":      resource.MustParse("1"),
		}, corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("7910m"),
			corev1.ResourceMemory: resource.MustParse("30Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
			"nvidia.com/gpu":      resource.MustParse("1"),
		}),
		nextNumber: 4,
	}
	return &cloud{groups: []*group{general, gpu}}
}

func templateNode(name string, labels map[string]string, taints []corev1.Taint, capacity, allocatable corev1.ResourceList) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: "interop://template/" + name, Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func runServer(args []string) error {
	flags := flag.NewFlagSet("server", flag.ContinueOnError)
	address := flags.String("address", "127.0.0.1:0", "listen address (port 0: any free port)")
	var files tlsFlags
	files.register(flags)
	if err := flags.Parse(args); err != nil {
		return err
	}
	useTLS, err := files.enabled()
	if err != nil {
		return err
	}
	var options []grpc.ServerOption
	mode := "plaintext"
	if useTLS {
		config, err := files.serverTLS()
		if err != nil {
			return err
		}
		options = append(options, grpc.Creds(credentials.NewTLS(config)))
		mode = "mutual TLS"
	}
	service, err := loadService()
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *address, err)
	}
	server := grpc.NewServer(options...)
	server.RegisterService(serviceDescription(service, newCloud()), nil)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.GracefulStop()
	}()
	// The test harness waits for this line and reads the address from it.
	fmt.Printf("ready: listening on %s (%s)\n", listener.Addr(), mode)
	return server.Serve(listener)
}

// serviceDescription registers one handler per method of the schema: the request is decoded into
// a dynamic message of the method's input type, the answer built as its output type.
func serviceDescription(service protoreflect.ServiceDescriptor, cloud *cloud) *grpc.ServiceDesc {
	description := &grpc.ServiceDesc{
		ServiceName: string(service.FullName()),
		HandlerType: (*any)(nil),
		Metadata:    schemaFile,
	}
	methods := service.Methods()
	for i := 0; i < methods.Len(); i++ {
		method := methods.Get(i)
		description.Methods = append(description.Methods, grpc.MethodDesc{
			MethodName: string(method.Name()),
			Handler: func(_ any, ctx context.Context, decode func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				request := dynamicpb.NewMessage(method.Input())
				if err := decode(request); err != nil {
					return nil, err
				}
				answer, err := cloud.answer(string(method.Name()), request)
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", method.Name(), err)
					return nil, err
				}
				response, err := messageFrom(method.Output(), answer)
				if err != nil {
					return nil, status.Error(codes.Internal, err.Error())
				}
				return proto.Message(response), nil
			},
		})
	}
	return description
}

// answer is the cloud's reply to one call, as proto JSON fields of the response type. Errors are
// plain (code 2 UNKNOWN on the wire), as upstream's example server sends them.
func (c *cloud) answer(method string, request protoreflect.Message) (map[string]any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch method {
	case "Refresh", "Cleanup":
		return nil, nil
	case "NodeGroups":
		groups := []any{}
		for _, g := range c.groups {
			groups = append(groups, g.message())
		}
		return map[string]any{"nodeGroups": groups}, nil
	case "NodeGroupForNode":
		node := messageField(request, "node")
		if node == nil {
			return nil, errors.New("NodeGroupForNode request without a node")
		}
		owner := c.groupOf(stringField(node, "providerID"))
		if owner == nil {
			return map[string]any{"nodeGroup": map[string]any{}}, nil
		}
		return map[string]any{"nodeGroup": owner.message()}, nil
	case "GPULabel":
		return map[string]any{"label": gpuLabel}, nil
	case "GetAvailableGPUTypes":
		types := map[string]any{}
		for _, name := range gpuTypes {
			types[name] = map[string]any{}
		}
		return map[string]any{"gpuTypes": types}, nil
	case "NodeGroupTemplateNodeInfo", "NodeGroupTargetSize", "NodeGroupIncreaseSize",
		"NodeGroupDecreaseTargetSize", "NodeGroupDeleteNodes", "NodeGroupNodes", "NodeGroupGetOptions":
		g := c.group(stringField(request, "id"))
		if g == nil {
			return nil, fmt.Errorf("node group %q not found", stringField(request, "id"))
		}
		return g.answer(method, request)
	default:
		// Pricing: the generated base of a Go server answers 12 for what it does not implement.
		return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
	}
}

func (c *cloud) group(id string) *group {
	for _, g := range c.groups {
		if g.id == id {
			return g
		}
	}
	return nil
}

func (c *cloud) groupOf(providerID string) *group {
	for _, g := range c.groups {
		for _, i := range g.instances {
			if i.id == providerID {
				return g
			}
		}
	}
	return nil
}

func (g *group) message() map[string]any {
	return map[string]any{"id": g.id, "minSize": g.min, "maxSize": g.max, "debug": g.debug}
}

func (g *group) answer(method string, request protoreflect.Message) (map[string]any, error) {
	switch method {
	case "NodeGroupTemplateNodeInfo":
		bytes, err := g.template.Marshal()
		if err != nil {
			return nil, err
		}
		return map[string]any{"nodeBytes": bytes}, nil
	case "NodeGroupTargetSize":
		return map[string]any{"targetSize": g.target}, nil
	case "NodeGroupIncreaseSize":
		delta := int(intField(request, "delta"))
		if delta <= 0 {
			return nil, fmt.Errorf("size increase must be positive, got %d", delta)
		}
		if g.target+delta > g.max {
			return nil, fmt.Errorf("size increase too large: desired %d, max %d", g.target+delta, g.max)
		}
		for i := 0; i < delta; i++ {
			id := fmt.Sprintf("%s%d", g.instanceIDPrefix, g.nextNumber)
			g.nextNumber++
			g.instances = append(g.instances, instance{id: id, state: stateCreating})
		}
		g.target += delta
		return nil, nil
	case "NodeGroupDecreaseTargetSize":
		delta := int(intField(request, "delta"))
		if delta >= 0 {
			return nil, fmt.Errorf("size decrease must be negative, got %d", delta)
		}
		creating := 0
		for _, i := range g.instances {
			if i.state == stateCreating && i.errorCode == "" {
				creating++
			}
		}
		if -delta > creating {
			return nil, fmt.Errorf("attempt to delete existing nodes: decrease %d, only %d being created", -delta, creating)
		}
		// Cancel the newest requests first.
		for n := len(g.instances) - 1; n >= 0 && delta < 0; n-- {
			if g.instances[n].state == stateCreating && g.instances[n].errorCode == "" {
				g.instances = append(g.instances[:n], g.instances[n+1:]...)
				g.target--
				delta++
			}
		}
		return nil, nil
	case "NodeGroupDeleteNodes":
		nodes := listField(request, "nodes")
		for _, node := range nodes {
			if g.index(stringField(node, "providerID")) < 0 {
				return nil, fmt.Errorf("node %q (%q) does not belong to group %s",
					stringField(node, "name"), stringField(node, "providerID"), g.id)
			}
		}
		if g.target-len(nodes) < g.min {
			return nil, fmt.Errorf("deleting %d nodes would take group %s below its minimum %d", len(nodes), g.id, g.min)
		}
		for _, node := range nodes {
			n := g.index(stringField(node, "providerID"))
			g.instances = append(g.instances[:n], g.instances[n+1:]...)
			g.target--
		}
		return nil, nil
	case "NodeGroupNodes":
		instances := []any{}
		for _, i := range g.instances {
			message := map[string]any{"id": i.id}
			if i.state != 0 {
				instanceStatus := map[string]any{"instanceState": i.state}
				if i.errorCode != "" {
					instanceStatus["errorInfo"] = map[string]any{
						"errorCode": i.errorCode, "errorMessage": i.errorMessage, "instanceErrorClass": i.errorClass,
					}
				}
				message["status"] = instanceStatus
			}
			instances = append(instances, message)
		}
		return map[string]any{"instances": instances}, nil
	case "NodeGroupGetOptions":
		if messageField(request, "defaults") == nil {
			return nil, errors.New("NodeGroupGetOptions request without defaults")
		}
		if g.options == nil {
			return nil, nil
		}
		return map[string]any{"nodeGroupAutoscalingOptions": g.options}, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
}

func (g *group) index(providerID string) int {
	for n, i := range g.instances {
		if i.id == providerID {
			return n
		}
	}
	return -1
}
