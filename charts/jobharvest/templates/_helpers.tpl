{{- define "jobharvest.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name prefixes every object. It is capped at 52 characters because the
longest suffix added to it ("-log-reader") must still fit a 63-character label value.
*/}}
{{- define "jobharvest.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobharvest.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "jobharvest.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "jobharvest.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobharvest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "jobharvest.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jobharvest.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the serving certificate, in every certificate mode. */}}
{{- define "jobharvest.certSecretName" -}}
{{- if eq .Values.certificates.mode "provided" }}
{{- required "certificates.provided.secretName is required in provided mode" .Values.certificates.provided.secretName }}
{{- else }}
{{- printf "%s-tls" (include "jobharvest.fullname" .) }}
{{- end }}
{{- end }}

{{- define "jobharvest.logReaderRole" -}}
{{- printf "%s-log-reader" (include "jobharvest.fullname" .) }}
{{- end }}

{{- /* With a digest, the image is pinned by it (the tag stays, for people to read). */ -}}
{{- define "jobharvest.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- with .Values.image.digest }}{{ printf "@%s" . }}{{ end }}
{{- end }}

{{- define "jobharvest.sidecarImage" -}}
{{- $repo := default .Values.image.repository .Values.sidecar.image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.sidecar.image.tag }}
{{- /* The webhook's digest applies only to the same image: not when the sidecar's repository or tag is set apart. */ -}}
{{- $sameImage := and (not .Values.sidecar.image.repository) (not .Values.sidecar.image.tag) }}
{{- $digest := .Values.sidecar.image.digest | default (ternary .Values.image.digest "" $sameImage) }}
{{- printf "%s:%s" $repo $tag }}
{{- with $digest }}{{ printf "@%s" . }}{{ end }}
{{- end }}

{{/*
The request body codec: sink.compression, or none where the older sink.gzip is false.
*/}}
{{- define "jobharvest.compression" -}}
{{- $codec := .Values.sink.compression | default "gzip" -}}
{{- if and (eq $codec "gzip") (not .Values.sink.gzip) }}none{{ else }}{{ $codec }}{{ end -}}
{{- end }}

{{/*
The global configuration file (docs/configuration.md, "Global configuration").
Empty strings are left out, so that the webhook's own defaults apply to them.
*/}}
{{- define "jobharvest.config" -}}
{{- $sink := dict "type" .Values.sink.type "gzip" .Values.sink.gzip "compression" (include "jobharvest.compression" .) }}
{{- range $key := list "endpoint" "authSecret" "tlsSecret" "headers" "esIndex" "otlpEncoding" "lokiTenant" "forwardTag" }}
{{- with index $.Values.sink $key }}
{{- $_ := set $sink $key . }}
{{- end }}
{{- end }}
{{- $query := dict }}
{{- range $key := list "type" "endpoint" "authSecret" }}
{{- with index $.Values.query $key }}
{{- $_ := set $query $key . }}
{{- end }}
{{- end }}
{{- /* Each tenant mapping with its empty strings left out; 0 is an id. A name, and a namespace listed by name, belong to one mapping. */}}
{{- $tenants := list }}
{{- $tenantNames := dict }}
{{- $listedBy := dict }}
{{- range .Values.tenants }}
{{- if hasKey $tenantNames .name }}
{{- fail (printf "tenants: the name %s is used twice; see docs/configuration.md" .name) }}
{{- end }}
{{- $_ := set $tenantNames .name true }}
{{- $name := .name }}
{{- range (default list .namespaces) }}
{{- if hasKey $listedBy . }}
{{- fail (printf "tenants: namespace %s is listed by both %s and %s; see docs/configuration.md" . (get $listedBy .) $name) }}
{{- end }}
{{- $_ := set $listedBy . $name }}
{{- end }}
{{- $t := dict }}
{{- range $key, $v := . }}
{{- if and (not (kindIs "invalid" $v)) (ne (toString $v) "") }}
{{- $_ := set $t $key $v }}
{{- end }}
{{- end }}
{{- $tenants = append $tenants $t }}
{{- end }}
{{- $shaping := dict }}
{{- range $group, $keys := dict "multiline" (list "rules" "start" "maxLines" "maxBytes" "flushMs") "parse" (list "format" "maxFields" "maxDepth" "original") "mask" (list "builtin" "patterns" "replacement") "carry" (list "labels" "annotations") "loki" (list "streamLabels" "maxMetadata") }}
{{- $values := index $.Values.sidecar $group }}
{{- $out := dict }}
{{- range $key := $keys }}
{{- $v := index $values $key }}
{{- /* null and "" leave the key out, so that the sidecar's own default applies; 0 is a value. */}}
{{- if and (not (kindIs "invalid" $v)) (ne (toString $v) "") }}
{{- $_ := set $out $key $v }}
{{- end }}
{{- end }}
{{- $_ := set $shaping $group $out }}
{{- end }}
{{- $sidecar := dict
  "image" (include "jobharvest.sidecarImage" .)
  "imagePullPolicy" (default .Values.image.pullPolicy .Values.sidecar.imagePullPolicy)
  "args" (list "--max-semi-space-size=4" "--max-old-space-size=48" "--no-concurrent-recompilation" "/app/sidecar.mjs")
  "startedCommand" (list "/nodejs/bin/node" "/app/sidecar.mjs" "--wait-started")
  "runAsUser" .Values.sidecar.runAsUser
  "resources" .Values.sidecar.resources
  "boundedResources" .Values.sidecar.boundedResources
  "stateSizeLimit" .Values.sidecar.stateSizeLimit
  "podLogsHostPath" .Values.sidecar.podLogsHostPath
}}
{{- $sidecar = merge $sidecar $shaping }}
{{- $config := dict
  "mode" .Values.mode
  "sink" $sink
  "ttlSecondsAfterFinished" .Values.ttlSecondsAfterFinished
  "maxTtlSecondsAfterFinished" .Values.maxTtlSecondsAfterFinished
  "drainSeconds" .Values.drainSeconds
  "raiseGracePeriod" .Values.raiseGracePeriod
  "namespaceSelection" .Values.namespaceSelection
  "webhookNamespace" .Release.Namespace
  "excludedNamespaces" .Values.excludedNamespaces
  "query" $query
  "logsUrlTemplate" .Values.logsUrlTemplate
  "ownedJobs" .Values.ownedJobs
  "sidecar" $sidecar
}}
{{- with $tenants }}
{{- $_ := set $config "tenants" . }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{- define "jobharvest.harvesterName" -}}
{{- printf "%s-harvester" (include "jobharvest.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jobharvest.harvesterServiceAccountName" -}}
{{- include "jobharvest.harvesterName" . }}
{{- end }}

{{- define "jobharvest.harvesterSelectorLabels" -}}
app.kubernetes.io/name: {{ include "jobharvest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: harvester
{{- end }}

{{- define "jobharvest.harvesterLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "jobharvest.harvesterSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret with the key injections are signed with. */}}
{{- define "jobharvest.signingSecretName" -}}
{{- default (printf "%s-signing" (include "jobharvest.fullname" .)) .Values.signing.existingSecret }}
{{- end }}

{{- define "jobharvest.uninstallLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "jobharvest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: uninstall
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
