{{- define "ferroscale.labels" -}}
app.kubernetes.io/name: ferroscale
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "ferroscale.selector" -}}
app.kubernetes.io/name: ferroscale
app.kubernetes.io/instance: {{ .Release.Name }}
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

{{- /* Non-empty when the clusterapi provider reads the management cluster's kubeconfig from a
Secret: the pod then mounts it and passes it as --cloud-config. */ -}}
{{- define "ferroscale.clusterapiManagementKubeconfig" -}}
{{- if eq .Values.cloudProvider "clusterapi" -}}
{{- .Values.clusterapi.managementKubeconfigSecret.name -}}
{{- end -}}
{{- end -}}
