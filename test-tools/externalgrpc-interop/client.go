package main

// The client side: a fixed sequence of calls in the order an autoscaler loop makes them, against
// any externalgrpc server, and a JSON report of what came back, decoded as a Go peer decodes it
// (template nodes with the Kubernetes Go types' Unmarshal).

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	corev1 "k8s.io/api/core/v1"
)

// The options upstream's core sends as defaults with every NodeGroupGetOptions (its flag
// defaults, spec 4.8.4).
var upstreamDefaultOptions = map[string]any{
	"scaleDownUtilizationThreshold":    0.5,
	"scaleDownGpuUtilizationThreshold": 0.5,
	"zeroOrMaxNodeScaling":             false,
	"ignoreDaemonSetsUtilization":      false,
	"scaleDownUnneededDuration":        "600s",
	"scaleDownUnreadyDuration":         "1200s",
	"MaxNodeProvisionDuration":         "900s",
}

// A node no group owns, as an autoscaler asks about a control-plane node.
var foreignNode = map[string]any{
	"name":        "interop-control-plane",
	"providerID":  "elsewhere://control-plane-0",
	"labels":      map[string]string{"node-role.kubernetes.io/control-plane": ""},
	"annotations": map[string]string{"interop.test/owner": "nobody"},
}

type report struct {
	// Failed calls by "Method" or "Method group", with the gRPC status the Go client saw.
	Failures   map[string]callError `json:"failures"`
	NodeGroups []groupReport        `json:"nodeGroups"`
	// Resizing the group named by --group (else the first group).
	Resize   *resizeReport `json:"resize,omitempty"`
	GPULabel *string       `json:"gpuLabel,omitempty"`
	GPUTypes []string      `json:"gpuTypes"`
	// NodeGroupForNode for a node outside every group.
	ForeignNode *lookupReport `json:"foreignNode,omitempty"`
	// NodeGroupForNode for the first instance of the resized group, as a registered node.
	OwnedNode *lookupReport `json:"ownedNode,omitempty"`
}

type callError struct {
	Code     int    `json:"code"`
	CodeName string `json:"codeName"`
	Message  string `json:"message"`
}

type groupReport struct {
	ID         string           `json:"id"`
	MinSize    int64            `json:"minSize"`
	MaxSize    int64            `json:"maxSize"`
	Debug      string           `json:"debug"`
	Template   *templateReport  `json:"template,omitempty"`
	TargetSize *int64           `json:"targetSize,omitempty"`
	Instances  []instanceReport `json:"instances"`
	// "override" or "none" (the options message absent: use the defaults).
	OptionsAnswer string         `json:"optionsAnswer,omitempty"`
	Options       *optionsReport `json:"options,omitempty"`
}

type templateReport struct {
	FirstByte        string            `json:"firstByte"`
	Name             string            `json:"name"`
	ProviderID       string            `json:"providerID"`
	Labels           map[string]string `json:"labels"`
	Taints           []taintReport     `json:"taints"`
	Unschedulable    bool              `json:"unschedulable"`
	Capacity         map[string]string `json:"capacity"`
	CapacityMilli    map[string]int64  `json:"capacityMilli"`
	Allocatable      map[string]string `json:"allocatable"`
	AllocatableMilli map[string]int64  `json:"allocatableMilli"`
	Conditions       map[string]string `json:"conditions"`
}

type taintReport struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

type instanceReport struct {
	ID string `json:"id"`
	// Absent status is reported as no state at all; 0 is an explicit "unspecified".
	State        *int64  `json:"state,omitempty"`
	ErrorCode    *string `json:"errorCode,omitempty"`
	ErrorMessage *string `json:"errorMessage,omitempty"`
	ErrorClass   *int64  `json:"errorClass,omitempty"`
}

type optionsReport struct {
	ScaleDownUtilizationThreshold    float64  `json:"scaleDownUtilizationThreshold"`
	ScaleDownGpuUtilizationThreshold float64  `json:"scaleDownGpuUtilizationThreshold"`
	ZeroOrMaxNodeScaling             bool     `json:"zeroOrMaxNodeScaling"`
	IgnoreDaemonSetsUtilization      bool     `json:"ignoreDaemonSetsUtilization"`
	ScaleDownUnneededSeconds         *float64 `json:"scaleDownUnneededSeconds,omitempty"`
	ScaleDownUnreadySeconds          *float64 `json:"scaleDownUnreadySeconds,omitempty"`
	MaxNodeProvisionSeconds          *float64 `json:"maxNodeProvisionSeconds,omitempty"`
}

type resizeReport struct {
	Group                  string           `json:"group"`
	TargetBefore           *int64           `json:"targetBefore,omitempty"`
	TargetAfterIncrease    *int64           `json:"targetAfterIncrease,omitempty"`
	InstancesAfterIncrease []instanceReport `json:"instancesAfterIncrease"`
	TargetAfterDecrease    *int64           `json:"targetAfterDecrease,omitempty"`
	InstancesAfterDecrease []instanceReport `json:"instancesAfterDecrease"`
}

type lookupReport struct {
	// Whether the answer carried a nodeGroup message at all (an empty one is present).
	NodeGroupPresent bool   `json:"nodeGroupPresent"`
	ID               string `json:"id"`
	MinSize          int64  `json:"minSize"`
	MaxSize          int64  `json:"maxSize"`
	Debug            string `json:"debug"`
}

type client struct {
	connection *grpc.ClientConn
	methods    protoreflect.MethodDescriptors
	timeout    time.Duration
	report     *report
}

func runClient(args []string) error {
	flags := flag.NewFlagSet("client", flag.ContinueOnError)
	address := flags.String("address", "", "server address, host:port")
	group := flags.String("group", "", "group to resize (default: the first group)")
	timeout := flags.Duration("timeout", defaultCallTimeout, "deadline of every call (upstream's grpc_timeout)")
	var files tlsFlags
	files.register(flags)
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *address == "" {
		return errors.New("--address is required")
	}
	useTLS, err := files.enabled()
	if err != nil {
		return err
	}
	credentialsOption := grpc.WithTransportCredentials(insecure.NewCredentials())
	if useTLS {
		config, err := files.clientTLS(*address)
		if err != nil {
			return err
		}
		credentialsOption = grpc.WithTransportCredentials(credentials.NewTLS(config))
	}
	service, err := loadService()
	if err != nil {
		return err
	}
	// Upstream dials the address as given, without name resolution by gRPC ("passthrough").
	connection, err := grpc.NewClient("passthrough:///"+*address, credentialsOption)
	if err != nil {
		return fmt.Errorf("creating the channel to %s: %w", *address, err)
	}
	defer connection.Close()

	c := &client{
		connection: connection,
		methods:    service.Methods(),
		timeout:    *timeout,
		report:     &report{Failures: map[string]callError{}, NodeGroups: []groupReport{}, GPUTypes: []string{}},
	}
	completed := c.runSequence(*group)
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(c.report); err != nil {
		return err
	}
	if !completed {
		return errors.New("the sequence stopped early; see failures in the report")
	}
	return nil
}

// runSequence makes the calls; false when a call the rest depends on failed.
func (c *client) runSequence(resizeGroup string) bool {
	if _, ok := c.call("Refresh", "", nil); !ok {
		return false
	}
	answer, ok := c.call("NodeGroups", "", nil)
	if !ok {
		return false
	}
	for _, group := range listField(answer, "nodeGroups") {
		c.report.NodeGroups = append(c.report.NodeGroups, groupReport{
			ID:        stringField(group, "id"),
			MinSize:   intField(group, "minSize"),
			MaxSize:   intField(group, "maxSize"),
			Debug:     stringField(group, "debug"),
			Instances: []instanceReport{},
		})
	}
	if len(c.report.NodeGroups) == 0 {
		return false
	}
	for i := range c.report.NodeGroups {
		group := &c.report.NodeGroups[i]
		group.Template = c.template(group.ID)
		group.TargetSize = c.targetSize(group.ID)
		group.Instances = c.instances(group.ID)
		c.options(group)
	}

	resized := &c.report.NodeGroups[0]
	for i := range c.report.NodeGroups {
		if c.report.NodeGroups[i].ID == resizeGroup {
			resized = &c.report.NodeGroups[i]
		}
	}
	resize := &resizeReport{Group: resized.ID}
	c.report.Resize = resize
	resize.TargetBefore = c.targetSize(resized.ID)
	if _, ok := c.call("NodeGroupIncreaseSize", resized.ID, map[string]any{"id": resized.ID, "delta": 1}); !ok {
		return false
	}
	resize.TargetAfterIncrease = c.targetSize(resized.ID)
	resize.InstancesAfterIncrease = c.instances(resized.ID)

	if answer, ok := c.call("GPULabel", "", nil); ok {
		label := stringField(answer, "label")
		c.report.GPULabel = &label
	}
	if answer, ok := c.call("GetAvailableGPUTypes", "", nil); ok {
		c.report.GPUTypes = mapKeys(answer, "gpuTypes")
		sort.Strings(c.report.GPUTypes)
	}
	c.report.ForeignNode = c.lookup("foreign", foreignNode)
	if len(resized.Instances) > 0 {
		owned := resized.Instances[0].ID
		c.report.OwnedNode = c.lookup("owned", map[string]any{"name": "interop-owned-node", "providerID": owned})
	}

	// The instance the increase asked for has not registered: cancelling it is what the core does
	// when a scale-up times out.
	if _, ok := c.call("NodeGroupDecreaseTargetSize", resized.ID, map[string]any{"id": resized.ID, "delta": -1}); !ok {
		return false
	}
	resize.TargetAfterDecrease = c.targetSize(resized.ID)
	resize.InstancesAfterDecrease = c.instances(resized.ID)
	return len(c.report.Failures) == 0
}

// call makes one RPC with the deadline; a failure is recorded under "method subject".
func (c *client) call(method, subject string, request map[string]any) (protoreflect.Message, bool) {
	descriptor := c.methods.ByName(protoreflect.Name(method))
	key := method
	if subject != "" {
		key += " " + subject
	}
	if descriptor == nil {
		c.report.Failures[key] = callError{Code: -1, Message: "no such method in the schema"}
		return nil, false
	}
	input, err := messageFrom(descriptor.Input(), request)
	if err != nil {
		c.report.Failures[key] = callError{Code: -1, Message: err.Error()}
		return nil, false
	}
	output := dynamicpb.NewMessage(descriptor.Output())
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	path := "/" + serviceName + "/" + method
	if err := c.connection.Invoke(ctx, path, input, output); err != nil {
		answer := status.Convert(err)
		c.report.Failures[key] = callError{
			Code:     int(answer.Code()),
			CodeName: answer.Code().String(),
			Message:  answer.Message(),
		}
		return nil, false
	}
	return output, true
}

func (c *client) targetSize(group string) *int64 {
	answer, ok := c.call("NodeGroupTargetSize", group, map[string]any{"id": group})
	if !ok {
		return nil
	}
	size := intField(answer, "targetSize")
	return &size
}

func (c *client) instances(group string) []instanceReport {
	instances := []instanceReport{}
	answer, ok := c.call("NodeGroupNodes", group, map[string]any{"id": group})
	if !ok {
		return instances
	}
	for _, instance := range listField(answer, "instances") {
		seen := instanceReport{ID: stringField(instance, "id")}
		if instanceStatus := messageField(instance, "status"); instanceStatus != nil {
			state := intField(instanceStatus, "instanceState")
			seen.State = &state
			if info := messageField(instanceStatus, "errorInfo"); info != nil && stringField(info, "errorCode") != "" {
				code, message, class := stringField(info, "errorCode"), stringField(info, "errorMessage"), intField(info, "instanceErrorClass")
				seen.ErrorCode, seen.ErrorMessage, seen.ErrorClass = &code, &message, &class
			}
		}
		instances = append(instances, seen)
	}
	return instances
}

func (c *client) options(group *groupReport) {
	answer, ok := c.call("NodeGroupGetOptions", group.ID, map[string]any{"id": group.ID, "defaults": upstreamDefaultOptions})
	if !ok {
		return
	}
	options := messageField(answer, "nodeGroupAutoscalingOptions")
	if options == nil {
		group.OptionsAnswer = "none"
		return
	}
	group.OptionsAnswer = "override"
	group.Options = &optionsReport{
		ScaleDownUtilizationThreshold:    floatField(options, "scaleDownUtilizationThreshold"),
		ScaleDownGpuUtilizationThreshold: floatField(options, "scaleDownGpuUtilizationThreshold"),
		ZeroOrMaxNodeScaling:             boolField(options, "zeroOrMaxNodeScaling"),
		IgnoreDaemonSetsUtilization:      boolField(options, "ignoreDaemonSetsUtilization"),
		ScaleDownUnneededSeconds:         durationSeconds(options, "scaleDownUnneededDuration"),
		ScaleDownUnreadySeconds:          durationSeconds(options, "scaleDownUnreadyDuration"),
		MaxNodeProvisionSeconds:          durationSeconds(options, "MaxNodeProvisionDuration"),
	}
}

// template decodes nodeBytes the way upstream's client does: (&v1.Node{}).Unmarshal.
func (c *client) template(group string) *templateReport {
	answer, ok := c.call("NodeGroupTemplateNodeInfo", group, map[string]any{"id": group})
	if !ok {
		return nil
	}
	raw := bytesField(answer, "nodeBytes")
	if len(raw) == 0 {
		c.report.Failures["NodeGroupTemplateNodeInfo "+group] = callError{Code: -1, Message: "OK with empty nodeBytes"}
		return nil
	}
	var node corev1.Node
	if err := node.Unmarshal(raw); err != nil {
		c.report.Failures["NodeGroupTemplateNodeInfo "+group] = callError{Code: -1, Message: "v1.Node Unmarshal: " + err.Error()}
		return nil
	}
	template := &templateReport{
		FirstByte:        hex.EncodeToString(raw[:1]),
		Name:             node.Name,
		ProviderID:       node.Spec.ProviderID,
		Labels:           node.Labels,
		Taints:           []taintReport{},
		Unschedulable:    node.Spec.Unschedulable,
		Capacity:         map[string]string{},
		CapacityMilli:    map[string]int64{},
		Allocatable:      map[string]string{},
		AllocatableMilli: map[string]int64{},
		Conditions:       map[string]string{},
	}
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	for _, taint := range node.Spec.Taints {
		template.Taints = append(template.Taints, taintReport{Key: taint.Key, Value: taint.Value, Effect: string(taint.Effect)})
	}
	for name, quantity := range node.Status.Capacity {
		template.Capacity[string(name)] = quantity.String()
		template.CapacityMilli[string(name)] = quantity.MilliValue()
	}
	for name, quantity := range node.Status.Allocatable {
		template.Allocatable[string(name)] = quantity.String()
		template.AllocatableMilli[string(name)] = quantity.MilliValue()
	}
	for _, condition := range node.Status.Conditions {
		template.Conditions[string(condition.Type)] = string(condition.Status)
	}
	return template
}

func (c *client) lookup(subject string, node map[string]any) *lookupReport {
	answer, ok := c.call("NodeGroupForNode", subject, map[string]any{"node": node})
	if !ok {
		return nil
	}
	group := messageField(answer, "nodeGroup")
	if group == nil {
		return &lookupReport{}
	}
	return &lookupReport{
		NodeGroupPresent: true,
		ID:               stringField(group, "id"),
		MinSize:          intField(group, "minSize"),
		MaxSize:          intField(group, "maxSize"),
		Debug:            stringField(group, "debug"),
	}
}
