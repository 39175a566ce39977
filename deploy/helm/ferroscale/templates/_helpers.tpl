{{- define "ferroscale.labels" -}}
app.kubernetes.io/name: ferroscale
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "ferroscale.selector" -}}
app.kubernetes.io/name: ferroscale
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
