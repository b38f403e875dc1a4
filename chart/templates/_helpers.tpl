{{/*
Helpers. Templates refer to each value by its full path from the root of
the values (through $ inside range), never through `with` or `index`, so that
chart_test.go can check that every value is declared and used.

Every string from the values or the release reaches the YAML quoted (quote)
or through toYaml: unquoted, "2024" would be a number, "on" a boolean,
"a #1" lose its comment and "a: b" become a mapping. Names that end in a
fixed suffix (-nvidia, -alerts) are left bare: they are strings either way.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "xpu-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The object name prefix: fullnameOverride, else release name + chart name. */}}
{{- define "xpu-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels selecting the exporter pods (all vendors). */}}
{{- define "xpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xpu-exporter.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "xpu-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "xpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: xpu-exporter
{{- end }}

{{/* The ServiceAccount's name. */}}
{{- define "xpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "xpu-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest, else repository:tag (default appVersion). */}}
{{- define "xpu-exporter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when pod metadata comes from an API-server watch (needs RBAC, a token and NODE_NAME). */}}
{{- define "xpu-exporter.apiServerMetadata" -}}
{{- if and .Values.kubernetes.attribution (eq .Values.kubernetes.metadata.source "auto") }}true{{ end }}
{{- end }}

{{/* "true" when the kubelet Pods API socket directory is mounted. */}}
{{- define "xpu-exporter.podsAPIMetadata" -}}
{{- if and .Values.kubernetes.attribution (has .Values.kubernetes.metadata.source (list "auto" "podsAPI")) }}true{{ end }}
{{- end }}

{{/*
The job selector the shipped rules and dashboards were rendered with (the
mixin's xpuSelector); serviceMonitor.jobLabel must produce it.
*/}}
{{- define "xpu-exporter.checkJobLabel" -}}
{{- if and .Values.serviceMonitor.enabled (or .Values.prometheusRule.enabled .Values.dashboards.enabled) }}
{{- $want := printf "job=%q" .Values.serviceMonitor.jobLabel }}
{{- range $path, $_ := .Files.Glob "files/promrules/*.yaml" }}
{{- $found := regexFind "job=\"[^\"]*\"" ($.Files.Get $path) }}
{{- if and $found (ne $found $want) }}
{{- fail (printf "serviceMonitor.jobLabel %q: the shipped rules and dashboards select %s (%s); keep the default or render your own from mixin/ with a matching xpuSelector and turn prometheusRule and dashboards off" $.Values.serviceMonitor.jobLabel $found $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
