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
{{- include "outboxd.checkSettings" . -}}
{{- include "outboxd.noInlineSecrets" . -}}
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

{{/* The pod's volumes; .config is the ConfigMap holding the pipelines file, .mounts the secretMounts. */}}
{{- define "outboxd.volumes" -}}
- name: config
  configMap:
    name: {{ .config }}
- name: tmp
  emptyDir: {}
{{- range .mounts }}
- name: {{ .name }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
{{- end -}}

{{/* The container's volume mounts; . is the secretMounts. */}}
{{- define "outboxd.volumeMounts" -}}
- name: config
  mountPath: /etc/outboxd
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- range . }}
- name: {{ .name }}
  mountPath: {{ .mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
GOMEMLIMIT for resources.limits.memory: 90 % of it, in bytes, so that the
Go runtime's garbage collector works harder before the kernel's limit is
reached (outboxd's in-flight budget is a quarter of it). Empty without a
limit. A quantity this chart cannot read is refused.
*/}}
{{- define "outboxd.gomemlimit" -}}
{{- $m := toString (dig "limits" "memory" "" .Values.resources) -}}
{{- if $m -}}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|K|M|G|T)?$" $m) -}}
{{- fail (printf "resources.limits.memory %q: give a whole number of bytes, or with a unit of Ki, Mi, Gi, Ti, k, M, G or T (the chart sets GOMEMLIMIT to 90 %% of it)" $m) -}}
{{- end -}}
{{- $num := regexFind "^[0-9]+" $m | int64 -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $factor := get $units (trimPrefix (toString $num) $m) | int64 -}}
{{- div (mul $num $factor 9) 10 -}}
{{- end -}}
{{- end -}}

{{/*
Values that would put a secret into the pipelines file, which becomes a
ConfigMap: a database URL with a password, and the password settings. Each
must come from a file of a secretMount (the *-file keys) or from the
environment (${VAR} with env).
*/}}
{{- define "outboxd.noInlineSecrets" -}}
{{- $where := list (dict "at" "settings" "keys" .Values.settings) -}}
{{- range .Values.pipelines -}}
{{- $where = append $where (dict "at" (printf "pipelines[%s]" (toString .name)) "keys" .) -}}
{{- end -}}
{{- range $where -}}
{{- $at := .at -}}
{{- range $k, $v := .keys -}}
{{- $s := toString $v -}}
{{- if and (has $k (list "kafka-sasl-password" "schema-registry-password")) (not (regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}$" $s)) -}}
{{- fail (printf "%s.%s: a password in the pipelines file, which the chart puts in a ConfigMap: give it as %s-file from a secretMounts entry, or as ${VAR} from env" $at $k $k) -}}
{{- end -}}
{{- if and (eq $k "database-url") (or (regexMatch "^[a-zA-Z][a-zA-Z0-9+.-]*://[^/@]*:[^/@]*@" $s) (regexMatch "(^|[ &?])password=" $s)) -}}
{{- fail (printf "%s.database-url holds a password, and the chart puts the pipelines file in a ConfigMap: give it as database-url-file from a secretMounts entry, or as ${VAR} from env" $at) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Settings that cannot work together: a replica waits its rank's delay before
it takes a released slot, and a standby notices a release only at its next
slot retry, so two ranks less than a retry apart overtake each other.
*/}}
{{- define "outboxd.checkSettings" -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail "replicas: at least 1" -}}
{{- end -}}
{{- $retry := dig "slot-retry-interval" "1s" .Values.settings -}}
{{- if ge (include "outboxd.seconds" $retry | float64) (include "outboxd.seconds" .Values.rankDelay | float64) -}}
{{- fail (printf "rankDelay %s: keep it above settings.slot-retry-interval (%s), or a replica ranked after another may take a released slot first" .Values.rankDelay $retry) -}}
{{- end -}}
{{- end -}}

{{/* A Go duration of ms, s, m or h (one unit) in seconds; refused otherwise. */}}
{{- define "outboxd.seconds" -}}
{{- $d := toString . -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$" $d) -}}
{{- fail (printf "%q: give a duration of one unit: ms, s, m or h (3s, 500ms)" $d) -}}
{{- end -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $d | float64 -}}
{{- $unit := trimPrefix (regexFind "^[0-9]+(\\.[0-9]+)?" $d) $d -}}
{{- mulf $n (get (dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0) $unit) -}}
{{- end -}}

{{/*
"true" when the replicas must each get a node of their own: spread
required, or auto with at least as many schedulable nodes as replicas
(counted by lookup at install and upgrade; helm template, or a release
without the right to list nodes, counts none).
*/}}
{{- define "outboxd.spreadRequired" -}}
{{- if eq .Values.spread "required" -}}true
{{- else if eq .Values.spread "auto" -}}
{{- if ge (include "outboxd.schedulableNodes" . | int) (int .Values.replicas) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- define "outboxd.schedulableNodes" -}}
{{- $n := 0 -}}
{{- range (lookup "v1" "Node" "" "").items -}}
{{- if not .spec.unschedulable -}}{{- $n = add1 $n -}}{{- end -}}
{{- end -}}
{{- $n -}}
{{- end -}}

