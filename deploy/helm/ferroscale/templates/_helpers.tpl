{{- /* The chart's name for its objects' app.kubernetes.io/name label and the container. */ -}}
{{- define "ferroscale.name" -}}
{{- default "ferroscale" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The objects' name. fullnameOverride wins; with nameOverride, upstream's rule (the release name,
then the name, unless they are equal); otherwise the release name, as this chart always did. */ -}}
{{- define "ferroscale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if .Values.nameOverride -}}
{{- if eq .Values.nameOverride .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- else -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /* The labels selecting the autoscaler's pods (Deployment, Service, PDB, ServiceMonitor). */ -}}
{{- define "ferroscale.selector" -}}
app.kubernetes.io/name: {{ include "ferroscale.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- /* The labels of every object: the selector's, who manages it, and additionalLabels. */ -}}
{{- define "ferroscale.labels" -}}
{{ include "ferroscale.selector" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* The ServiceAccount the pod runs as (upstream's rule). */ -}}
{{- define "ferroscale.serviceAccountName" -}}
{{- if .Values.rbac.serviceAccount.create -}}
{{- default (include "ferroscale.fullname" .) .Values.rbac.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.rbac.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The container port of /metrics and /health-check. */ -}}
{{- define "ferroscale.port" -}}
{{- if kindIs "invalid" .Values.port -}}8085{{- else -}}{{ .Values.port }}{{- end -}}
{{- end -}}

{{- /* Where the externalgrpc cloud config and its mutual-TLS files are mounted in the container. */ -}}
{{- define "ferroscale.externalgrpcConfigDir" -}}
/etc/ferroscale/externalgrpc
{{- end -}}
{{- define "ferroscale.externalgrpcTlsDir" -}}
/etc/ferroscale/externalgrpc-tls
{{- end -}}

{{- /* Where the clusterapi provider's management-cluster kubeconfig Secret is mounted. */ -}}
{{- define "ferroscale.clusterapiManagementDir" -}}
/etc/ferroscale/clusterapi-management
{{- end -}}

{{- /* Non-empty when the clusterapi provider reads the management cluster's kubeconfig from the
Secret of clusterapi.managementKubeconfigSecret: the pod then mounts it and passes it as
--cloud-config. */ -}}
{{- define "ferroscale.clusterapiManagementKubeconfig" -}}
{{- if eq .Values.cloudProvider "clusterapi" -}}
{{- .Values.clusterapi.managementKubeconfigSecret.name -}}
{{- end -}}
{{- end -}}

{{- /* Non-empty when, by clusterAPIMode, the management cluster is the one the pod runs in (upstream
grants the Cluster API permissions to the chart's identity only then). */ -}}
{{- define "ferroscale.clusterapiManagementInCluster" -}}
{{- if and (eq .Values.cloudProvider "clusterapi") (has .Values.clusterAPIMode (list "incluster-incluster" "kubeconfig-incluster")) -}}
true
{{- end -}}
{{- end -}}

{{- /* The value of a flag in extraArgs, either form (the map's key, or the list's last
"--name=value"), and in customArgs; empty when absent. */ -}}
{{- define "ferroscale.extraFlag" -}}
{{- $name := .name -}}
{{- $values := .root.Values -}}
{{- $found := "" -}}
{{- if kindIs "map" $values.extraArgs -}}
{{- range $key, $value := $values.extraArgs -}}
{{- if eq (regexFind "^[^_]+" $key) $name -}}
{{- $found = toString $value -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $values.extraArgs -}}
{{- if hasPrefix (printf "--%s=" $name) . -}}
{{- $found = trimPrefix (printf "--%s=" $name) . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $values.customArgs -}}
{{- if hasPrefix (printf "--%s=" $name) . -}}
{{- $found = trimPrefix (printf "--%s=" $name) . -}}
{{- end -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{- /* Non-empty when --expander (extraArgs) lists the priority expander. */ -}}
{{- define "ferroscale.priorityExpanderEnabled" -}}
{{- if has "priority" (splitList "," (include "ferroscale.extraFlag" (dict "root" . "name" "expander"))) -}}
true
{{- end -}}
{{- end -}}

{{- /* Non-empty when extraArgs or customArgs turn --cloud-node-controller on: a true value
(Go's spellings), or the bare flag (a null value in the map form, `--cloud-node-controller` alone in
a list). */ -}}
{{- define "ferroscale.cloudNodeControllerEnabled" -}}
{{- $name := "cloud-node-controller" -}}
{{- $on := false -}}
{{- if has (include "ferroscale.extraFlag" (dict "root" . "name" $name)) (list "true" "1" "t" "T" "TRUE" "True") -}}
{{- $on = true -}}
{{- end -}}
{{- if kindIs "map" .Values.extraArgs -}}
{{- range $key, $value := .Values.extraArgs -}}
{{- if and (eq (regexFind "^[^_]+" $key) $name) (kindIs "invalid" $value) -}}
{{- $on = true -}}
{{- end -}}
{{- end -}}
{{- else if has (printf "--%s" $name) .Values.extraArgs -}}
{{- $on = true -}}
{{- end -}}
{{- if has (printf "--%s" $name) .Values.customArgs -}}
{{- $on = true -}}
{{- end -}}
{{- if $on -}}
true
{{- end -}}
{{- end -}}

{{- /* clusterapi: the value of upstream's --node-group-auto-discovery from autoDiscovery: clusterName,
namespace, then each label, comma-separated. */ -}}
{{- define "ferroscale.clusterapiAutoDiscovery" -}}
{{- $parts := list -}}
{{- with .Values.autoDiscovery.clusterName -}}
{{- $parts = append $parts (printf "clusterName=%s" (tpl (toString .) $)) -}}
{{- end -}}
{{- with .Values.autoDiscovery.namespace -}}
{{- $parts = append $parts (printf "namespace=%s" (toString .)) -}}
{{- end -}}
{{- range .Values.autoDiscovery.labels -}}
{{- range $key, $value := . -}}
{{- $parts = append $parts (printf "%s=%s" $key (toString $value)) -}}
{{- end -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{- /* The dashboard and alert files the chart ships (written beside the metrics; README.md says their format). */ -}}
{{- define "ferroscale.dashboardFile" -}}files/grafana-dashboard.json{{- end -}}
{{- define "ferroscale.rulesFile" -}}files/prometheus-rules.yaml{{- end -}}
