{{- define "outboxd.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's objects' name: the release's, with the chart's unless it holds it. */}}
{{- define "outboxd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "outboxd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outboxd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outboxd.labels" -}}
{{ include "outboxd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "outboxd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The pipelines file: the settings, the pipelines, and the process settings the chart owns. */}}
{{- define "outboxd.pipelinesFile" -}}
{{- if not .Values.pipelines -}}
{{- fail "pipelines: at least one pipeline is required (values.yaml shows one)" -}}
{{- end -}}
{{- range $k, $_ := .Values.settings -}}
{{- if has $k (list "metrics-addr" "replica" "replicas" "rank-delay" "pipelines") -}}
{{- fail (printf "settings.%s: the chart sets it (metricsPort, replicas, rankDelay, pipelines)" $k) -}}
{{- end -}}
{{- end -}}
{{- $file := merge (dict "metrics-addr" (printf ":%v" .Values.metricsPort) "replicas" (int .Values.replicas) "rank-delay" .Values.rankDelay "pipelines" .Values.pipelines) .Values.settings -}}
{{- toYaml $file -}}
{{- end -}}

{{/* The pod's volumes; .config is the ConfigMap holding the pipelines file. */}}
{{- define "outboxd.volumes" -}}
- name: config
  configMap:
    name: {{ .config }}
- name: tmp
  emptyDir: {}
{{- range .root.Values.secretMounts }}
- name: {{ .name }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
{{- end -}}

{{- define "outboxd.volumeMounts" -}}
- name: config
  mountPath: /etc/outboxd
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- range .Values.secretMounts }}
- name: {{ .name }}
  mountPath: {{ .mountPath }}
  readOnly: true
{{- end }}
{{- end -}}
