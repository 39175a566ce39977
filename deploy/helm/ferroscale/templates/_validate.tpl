{{- /*
Refuses, naming the key and the value, what upstream's chart would accept but Ferroscale cannot
honour: a cloud provider it does not ship, keys that configure such a provider set to anything but
upstream's default (a values file copied from upstream carries them at their defaults, which are
accepted and ignored), PodSecurityPolicy, and values that would give one flag twice.
*/ -}}
{{- define "ferroscale.validate" -}}
{{- $shipped := list "kwok" "externalgrpc" "clusterapi" "exoscale" -}}
{{- if not (has .Values.cloudProvider $shipped) -}}
{{- fail (printf "cloudProvider %s: Ferroscale ships the kwok, externalgrpc, clusterapi and exoscale providers only" (toJson .Values.cloudProvider)) -}}
{{- end -}}

{{- /* key -> (the provider it configures, the values upstream's chart versions default it to) */ -}}
{{- $otherClouds := dict
  "awsAccessKeyID" (list "upstream's aws provider" (list ""))
  "awsRegion" (list "upstream's aws provider" (list "us-east-1" ""))
  "awsSecretAccessKey" (list "upstream's aws provider" (list ""))
  "azureClientID" (list "upstream's azure provider" (list ""))
  "azureClientSecret" (list "upstream's azure provider" (list ""))
  "azureClusterName" (list "upstream's azure provider" (list ""))
  "azureEnableForceDelete" (list "upstream's azure provider" (list false))
  "azureNodeResourceGroup" (list "upstream's azure provider" (list ""))
  "azureResourceGroup" (list "upstream's azure provider" (list ""))
  "azureSubscriptionID" (list "upstream's azure provider" (list ""))
  "azureTenantID" (list "upstream's azure provider" (list ""))
  "azureUseManagedIdentityExtension" (list "upstream's azure provider" (list false))
  "azureUseWorkloadIdentityExtension" (list "upstream's azure provider" (list false))
  "azureUserAssignedIdentityID" (list "upstream's azure provider" (list ""))
  "azureVMType" (list "upstream's azure provider" (list "vmss" "AKS"))
  "civoApiKey" (list "upstream's civo provider" (list ""))
  "civoApiUrl" (list "upstream's civo provider" (list "https://api.civo.com"))
  "civoClusterID" (list "upstream's civo provider" (list ""))
  "civoRegion" (list "upstream's civo provider" (list ""))
  "magnumCABundlePath" (list "upstream's magnum provider" (list "/etc/kubernetes/ca-bundle.crt"))
  "magnumClusterName" (list "upstream's magnum provider" (list ""))
  "autoscalingGroupsnamePrefix" (list "upstream's gce provider" (list (list)))
  "cloudConfigPath" (list "only upstream's aws, gce, magnum and rancher providers" (list "" "/etc/gce.conf"))
-}}
{{- $refused := list -}}
{{- range $key, $rule := $otherClouds -}}
{{- if hasKey $.Values $key -}}
{{- $value := index $.Values $key -}}
{{- if not (or (kindIs "invalid" $value) (and (kindIs "slice" $value) (empty $value)) (has $value (index $rule 1))) -}}
{{- $refused = append $refused (printf "%s is %s, but it configures %s, which Ferroscale does not ship" $key (toJson $value) (index $rule 0)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Upstream's default tags hold a template, kept as text in its values file. */ -}}
{{- $upstreamTags := list "k8s.io/cluster-autoscaler/enabled" (printf "k8s.io/cluster-autoscaler/%s .Values.autoDiscovery.clusterName %s" "{{" "}}") -}}
{{- with .Values.autoDiscovery -}}
{{- if and (hasKey . "tags") (not (or (kindIs "invalid" .tags) (eq (toJson .tags) (toJson $upstreamTags)))) -}}
{{- $refused = append $refused (printf "autoDiscovery.tags is %s, but it configures upstream's aws provider, which Ferroscale does not ship" (toJson .tags)) -}}
{{- end -}}
{{- if and (hasKey . "roles") (not (or (kindIs "invalid" .roles) (eq (toJson .roles) (toJson (list "worker"))))) -}}
{{- $refused = append $refused (printf "autoDiscovery.roles is %s, but it configures upstream's magnum provider, which Ferroscale does not ship" (toJson .roles)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.rbac.pspEnabled -}}
{{- $refused = append $refused "rbac.pspEnabled is true, but PodSecurityPolicy was removed in Kubernetes 1.25 and Ferroscale's chart renders none" -}}
{{- end -}}
{{- if $refused -}}
{{- fail (printf "values this chart cannot honour (remove them, or set them to upstream's defaults): %s" (join "; " $refused)) -}}
{{- end -}}

{{- /* One flag from two places would leave the winner to the order of the arguments. */ -}}
{{- $cloudConfig := include "ferroscale.extraFlag" (dict "root" . "name" "cloud-config") -}}
{{- if eq .Values.cloudProvider "externalgrpc" -}}
{{- if and .Values.externalgrpc.address $cloudConfig -}}
{{- fail (printf "externalgrpc.address %s and --cloud-config=%s in extraArgs or customArgs both give the externalgrpc provider's --cloud-config; keep one" (toJson .Values.externalgrpc.address) $cloudConfig) -}}
{{- end -}}
{{- if not (or .Values.externalgrpc.address $cloudConfig) -}}
{{- fail "externalgrpc.address (host:port of the provider's gRPC server) is required with cloudProvider: externalgrpc, unless extraArgs or customArgs pass --cloud-config" -}}
{{- end -}}
{{- end -}}
{{- if and (include "ferroscale.clusterapiManagementKubeconfig" .) (has .Values.clusterAPIMode (list "incluster-kubeconfig" "kubeconfig-kubeconfig")) -}}
{{- fail (printf "clusterapi.managementKubeconfigSecret.name %s and clusterAPIMode %s both give the clusterapi provider's --cloud-config; keep one" (toJson .Values.clusterapi.managementKubeconfigSecret.name) .Values.clusterAPIMode) -}}
{{- end -}}
{{- if eq .Values.cloudProvider "exoscale" -}}
{{- range $index, $group := .Values.autoscalingGroups -}}
{{- if lt (int $group.minSize) 1 -}}
{{- fail (printf "autoscalingGroups[%d].minSize is %v, but the exoscale provider cannot scale a group from zero (its minimum is 1)" $index $group.minSize) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
