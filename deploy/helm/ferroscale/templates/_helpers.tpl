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
