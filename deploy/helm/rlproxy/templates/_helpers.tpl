{{- define "rlproxy.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rlproxy.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rlproxy.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rlproxy.secretName" -}}
{{- .Values.secret.existingSecret | default (include "rlproxy.fullname" .) -}}
{{- end -}}

{{/* The config file: the user's keys, then the addresses the chart owns. */}}
{{- define "rlproxy.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%v" .Values.service.respPort) -}}
{{- $_ := set $cfg "metrics_listen" (printf "0.0.0.0:%v" .Values.service.metricsPort) -}}
{{- if .Values.rls.enabled -}}
{{- $_ := set $cfg "rls_listen" (printf "0.0.0.0:%v" .Values.rls.port) -}}
{{- $_ := set $cfg "rls_config" "/etc/rlproxy/rls" -}}
{{- $_ := set $cfg "rls_response_headers" .Values.rls.responseHeaders -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
